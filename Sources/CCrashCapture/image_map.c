// The image map: every loaded image's path, address range and build id, so frames from a
// crashed process (whose addresses are meaningless after ASLR) can be symbolicated later.
#if defined(__linux__)
#define _GNU_SOURCE
#endif

#include "ccrash_capture.h"

#include <string.h>
#include <unistd.h>

#if defined(__linux__)
#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <link.h>
#include <limits.h>

// The GNU build id among the ELF notes in [note, end) (in memory or in a mapped file), or NULL.
static const uint8_t *gnu_build_id(const uint8_t *note, const uint8_t *end, size_t *length) {
    while (note + sizeof(ElfW(Nhdr)) <= end) {
        const ElfW(Nhdr) *header = (const ElfW(Nhdr) *)note;
        const uint8_t *name = note + sizeof(ElfW(Nhdr));
        const uint8_t *desc = name + ((header->n_namesz + 3) & ~3u);
        if (desc + header->n_descsz > end) break;
        if (header->n_type == NT_GNU_BUILD_ID && header->n_namesz == 4 && memcmp(name, "GNU", 4) == 0) {
            *length = header->n_descsz;
            return desc;
        }
        note = desc + ((header->n_descsz + 3) & ~3u);
    }
    return NULL;
}

// What an image's program headers say, from one walk: the lowest and highest PT_LOAD
// addresses and the build id. `base` is added to the segments' addresses; `file` (a mapped
// file of `file_length` bytes, or NULL for a loaded image) is where notes are read from: at
// their file offset, bounds-checked, instead of at their address in memory.
typedef struct {
    uint64_t low, high;
    const uint8_t *build_id;
    size_t build_id_length;
} segments;

static segments walk_segments(const ElfW(Phdr) *ph, size_t count, uint64_t base, const uint8_t *file, size_t file_length) {
    segments out = {UINT64_MAX, 0, NULL, 0};
    for (size_t i = 0; i < count; i++) {
        if (ph[i].p_type == PT_LOAD) {
            uint64_t start = base + ph[i].p_vaddr;
            if (start < out.low) out.low = start;
            if (start + ph[i].p_memsz > out.high) out.high = start + ph[i].p_memsz;
        } else if (ph[i].p_type == PT_NOTE && out.build_id == NULL) {
            const uint8_t *note;
            size_t size;
            if (file != NULL) {
                if (ph[i].p_offset + ph[i].p_filesz > file_length) continue;
                note = file + ph[i].p_offset;
                size = ph[i].p_filesz;
            } else {
                note = (const uint8_t *)(uintptr_t)(base + ph[i].p_vaddr);
                size = ph[i].p_memsz;
            }
            out.build_id = gnu_build_id(note, note + size, &out.build_id_length);
        }
    }
    return out;
}

typedef struct {
    void *context;
    ccrash_image_visitor visitor;
    char executable[PATH_MAX];
} linux_walk;

static int visit_phdr(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    linux_walk *walk = data;
    segments s = walk_segments(info->dlpi_phdr, info->dlpi_phnum, info->dlpi_addr, NULL, 0);
    if (s.high <= s.low) return 0;
    const char *path = info->dlpi_name;
    if (path == NULL || path[0] == 0) path = walk->executable;
    walk->visitor(walk->context, path, (uintptr_t)s.low, (size_t)(s.high - s.low), s.build_id, s.build_id_length);
    return 0;
}

void ccrash_each_image(void *context, ccrash_image_visitor visitor) {
    linux_walk walk;
    walk.context = context;
    walk.visitor = visitor;
    ssize_t n = readlink("/proc/self/exe", walk.executable, sizeof(walk.executable) - 1);
    walk.executable[n > 0 ? n : 0] = 0;
    dl_iterate_phdr(visit_phdr, &walk);
}

// The 64-bit ELF file at `path`, mapped read-only, with its program headers inside it; NULL
// when it cannot be read or is not one. The caller unmaps `*length` bytes.
static const uint8_t *map_elf64(const char *path, size_t *length) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof(Elf64_Ehdr)) {
        close(fd);
        return NULL;
    }
    *length = (size_t)st.st_size;
    const uint8_t *file = mmap(NULL, *length, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (file == MAP_FAILED) return NULL;
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)file;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64
        || eh->e_phoff + (uint64_t)eh->e_phnum * sizeof(Elf64_Phdr) > *length) {
        munmap((void *)file, *length);
        return NULL;
    }
    return file;
}

static segments file_segments(const uint8_t *file, size_t length) {
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)file;
    return walk_segments((const Elf64_Phdr *)(file + eh->e_phoff), eh->e_phnum, 0, file, length);
}

int ccrash_elf_symbol(const char *path, uint64_t offset, char *name, size_t size, uint64_t *symbol_offset) {
    size_t length;
    const uint8_t *file = map_elf64(path, &length);
    if (file == NULL) return 0;
    int found = 0;
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)file;
    if (eh->e_shoff + (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr) > length) goto done;
    uint64_t low = file_segments(file, length).low;
    if (low == UINT64_MAX) goto done;
    uint64_t vaddr = low + offset;
    const Elf64_Shdr *sh = (const Elf64_Shdr *)(file + eh->e_shoff);
    for (int pass = 0; pass < 2 && !found; pass++) {
        uint32_t wanted = pass == 0 ? SHT_SYMTAB : SHT_DYNSYM;
        for (int s = 0; s < eh->e_shnum && !found; s++) {
            if (sh[s].sh_type != wanted || sh[s].sh_link >= eh->e_shnum) continue;
            const Elf64_Shdr *strtab = &sh[sh[s].sh_link];
            if (sh[s].sh_offset + sh[s].sh_size > length || strtab->sh_offset + strtab->sh_size > length) continue;
            const Elf64_Sym *symbols = (const Elf64_Sym *)(file + sh[s].sh_offset);
            size_t count = sh[s].sh_size / sizeof(Elf64_Sym);
            const Elf64_Sym *best = NULL;
            for (size_t i = 0; i < count; i++) {
                const Elf64_Sym *sym = &symbols[i];
                if (ELF64_ST_TYPE(sym->st_info) != STT_FUNC || sym->st_value == 0) continue;
                uint64_t end = sym->st_value + (sym->st_size ? sym->st_size : 1);
                if (vaddr < sym->st_value || vaddr >= end) continue;
                if (best == NULL || sym->st_value > best->st_value) best = sym;
            }
            if (best != NULL && best->st_name < strtab->sh_size) {
                const char *text = (const char *)(file + strtab->sh_offset + best->st_name);
                size_t n = strnlen(text, strtab->sh_size - best->st_name);
                if (n >= size) n = size - 1;
                memcpy(name, text, n);
                name[n] = 0;
                *symbol_offset = vaddr - best->st_value;
                found = 1;
            }
        }
    }
done:
    munmap((void *)file, length);
    return found;
}

size_t ccrash_elf_build_id(const char *path, uint8_t *buffer, size_t size) {
    size_t length;
    const uint8_t *file = map_elf64(path, &length);
    if (file == NULL) return 0;
    segments s = file_segments(file, length);
    size_t copied = 0;
    if (s.build_id != NULL) {
        copied = s.build_id_length < size ? s.build_id_length : size;
        memcpy(buffer, s.build_id, copied);
    }
    munmap((void *)file, length);
    return copied;
}

#elif defined(__APPLE__)
#include <mach-o/dyld.h>
#include <mach-o/loader.h>

void ccrash_each_image(void *context, ccrash_image_visitor visitor) {
    uint32_t count = _dyld_image_count();
    for (uint32_t i = 0; i < count; i++) {
        const struct mach_header *header = _dyld_get_image_header(i);
        if (header == NULL || header->magic != MH_MAGIC_64) continue;
        intptr_t slide = _dyld_get_image_vmaddr_slide(i);
        const char *path = _dyld_get_image_name(i);
        const struct load_command *command =
            (const struct load_command *)((const char *)header + sizeof(struct mach_header_64));
        uintptr_t low = UINTPTR_MAX, high = 0;
        const uint8_t *uuid = NULL;
        for (uint32_t c = 0; c < header->ncmds; c++) {
            if (command->cmd == LC_SEGMENT_64) {
                const struct segment_command_64 *segment = (const struct segment_command_64 *)command;
                if (strcmp(segment->segname, "__PAGEZERO") != 0 && segment->vmsize > 0) {
                    uintptr_t start = (uintptr_t)segment->vmaddr + (uintptr_t)slide;
                    if (start < low) low = start;
                    if (start + segment->vmsize > high) high = start + segment->vmsize;
                }
            } else if (command->cmd == LC_UUID) {
                uuid = ((const struct uuid_command *)command)->uuid;
            }
            command = (const struct load_command *)((const char *)command + command->cmdsize);
        }
        if (high <= low) continue;
        visitor(context, path ? path : "", low, high - low, uuid, uuid ? 16 : 0);
    }
}

#else
void ccrash_each_image(void *context, ccrash_image_visitor visitor) {
    (void)context;
    (void)visitor;
}
#endif

#if !defined(__linux__)
size_t ccrash_elf_build_id(const char *path, uint8_t *buffer, size_t size) {
    (void)path;
    (void)buffer;
    (void)size;
    return 0;
}

int ccrash_elf_symbol(const char *path, uint64_t offset, char *name, size_t size, uint64_t *symbol_offset) {
    (void)path;
    (void)offset;
    (void)name;
    (void)size;
    (void)symbol_offset;
    return 0;
}
#endif
