#ifndef CBROTLIENCODER_SHIM_H
#define CBROTLIENCODER_SHIM_H
#include <brotli/encode.h>
#endif
