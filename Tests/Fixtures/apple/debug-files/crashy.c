static int __attribute__((noinline)) inner(int *p) { return *p; }
static inline int middle(int *p) { return inner(p) + 1; }
int main(int argc, char **argv) { return middle(argc > 5 ? &argc : 0); }
