/* How fast is a random walk through memory, by where that memory sits? The helper of
 * lab/memory_placement.py (which builds and runs it; see there for the questions).
 *
 *   memory_chase map   MIB SECONDS_PER_GROUP           per guest-physical GiB of a MIB buffer
 *   memory_chase fresh MIB PLACEMENTS SECONDS           two new buffers each placement
 *   memory_chase pair  MIB SECONDS SLICE_MS             two shared buffers, one walker per CPU
 *
 * A walk visits one random cache line in each 4 KiB page of its pages in a random order, each
 * load's address read from the one before (a pointer chase): no prefetcher can guess it, and
 * with far more pages than the TLB holds nearly every step costs a page walk, as a TPC-B
 * backend's reads of shared buffers do. The lines it touches (64 bytes a page, 2 MiB for
 * 128 MiB of pages) may stay in the last-level cache: the figure, nanoseconds a step, is
 * mostly the cost of translating the address.
 * Pages are 4 KiB (MADV_NOHUGEPAGE; shared memory with shmem_enabled=never is so already):
 * the current variant's pages. Output: one JSON object a line. Linux, root for pagemap. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096UL
#define LINE 64UL

static uint64_t rng = 88172645463325252ULL;
static uint64_t next(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    sched_setaffinity(0, sizeof s, &s);
}

static char *area(size_t bytes, int shared) {
    char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                   (shared ? MAP_SHARED : MAP_PRIVATE) | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { perror("mmap"); exit(1); }
    madvise(p, bytes, MADV_NOHUGEPAGE);
    for (size_t o = 0; o < bytes; o += PAGE) p[o] = 1;  /* every page its frame now */
    return p;
}

/* the guest-physical frame of each page (pagemap: bits 0-54, bit 63 present) */
static uint64_t frame(int fd, char *page) {
    uint64_t e = 0;
    if (pread(fd, &e, 8, (off_t)((uintptr_t)page / PAGE * 8)) != 8 || !(e >> 63)) return 0;
    return e & ((1ULL << 55) - 1);
}

/* link the given pages into one random cycle, a random line of each; the walk's start */
static void **chain(char **pages, size_t n) {
    for (size_t i = n - 1; i > 0; i--) {  /* Fisher-Yates */
        size_t j = next() % (i + 1);
        char *t = pages[i]; pages[i] = pages[j]; pages[j] = t;
    }
    void **first = NULL, **prev = NULL;
    for (size_t i = 0; i < n; i++) {
        void **at = (void **)(pages[i] + (next() % (PAGE / LINE)) * LINE);
        if (prev) *prev = at; else first = at;
        prev = at;
    }
    *prev = first;
    return first;
}

static void **whole(char *buf, size_t bytes) {
    size_t n = bytes / PAGE;
    char **pages = malloc(n * sizeof *pages);
    for (size_t i = 0; i < n; i++) pages[i] = buf + i * PAGE;
    void **c = chain(pages, n);
    free(pages);
    return c;
}

static volatile void *sink;

/* walk for `seconds`; nanoseconds a step, and where the walk stopped */
static double walk(void ***at, double seconds) {
    void **p = *at;
    uint64_t steps = 0;
    double t0 = now(), t;
    do {
        for (int i = 0; i < 4096; i++) p = (void **)*p;
        steps += 4096;
    } while ((t = now()) - t0 < seconds);
    *at = p;
    sink = p;
    return (t - t0) * 1e9 / steps;
}

static int by_value(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* where a buffer's pages sit, as JSON fields named NAME_...: their mean guest-physical address
 * (GiB), over how many 2 MiB guest-physical frames they are spread (the fewest is bytes / 2
 * MiB: contiguous), the buffer's virtual address (MiB) and the share of its pages in each GiB */
static void placed(const char *name, char *buf, size_t bytes, char *out, size_t room) {
    int fd = open("/proc/self/pagemap", O_RDONLY);
    size_t n = 0, frames = 0, count[256] = {0}, used;
    uint64_t *f = malloc(bytes / PAGE * sizeof *f);
    double sum = 0;
    for (size_t o = 0; o < bytes; o += PAGE) {
        uint64_t x = frame(fd, buf + o);
        if (x) { sum += (double)x * PAGE / (1 << 30); f[n++] = x >> 9; }
    }
    close(fd);
    qsort(f, n, sizeof *f, by_value);
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || f[i] != f[i - 1]) frames++;
        count[(f[i] >> 9) % 256]++;
    }
    used = snprintf(out, room, "\"%s_gib\": %.2f, \"%s_2m\": %zu, \"%s_va_mib\": %lu, "
                    "\"%s_by_gib\": {", name, n ? sum / n : -1, name, frames, name,
                    (unsigned long)((uintptr_t)buf >> 20), name);
    for (int g = 0, first = 1; g < 256; g++)
        if (count[g] && used < room) {
            used += snprintf(out + used, room - used, "%s\"%d\": %.3f", first ? "" : ", ", g,
                             (double)count[g] / n);
            first = 0;
        }
    if (used < room) snprintf(out + used, room - used, "}");
    free(f);
}

/* no guard here (fresh and pair make one): the one buffer is the process's first large
 * mapping, alike for every GiB, so its absolute figures may carry that mapping's slowdown
 * while the GiBs' figures against each other do not */
static int map(size_t mib, double secs) {
    size_t bytes = mib << 20, n = bytes / PAGE;
    char *buf = area(bytes, 0);
    int fd = open("/proc/self/pagemap", O_RDONLY);
    size_t groups = 0;
    uint64_t *gib = malloc(n * sizeof *gib);
    for (size_t i = 0; i < n; i++) {
        uint64_t f = frame(fd, buf + i * PAGE);
        gib[i] = f ? f * PAGE >> 30 : UINT64_MAX;
        if (f && gib[i] + 1 > groups) groups = gib[i] + 1;
    }
    close(fd);
    char **pages = malloc(n * sizeof *pages);
    pin(0);
    for (int round = 0; round < 2; round++)
        for (size_t g = 0; g < groups; g++) {
            size_t k = 0;
            for (size_t i = 0; i < n; i++) if (gib[i] == g) pages[k++] = buf + i * PAGE;
            if (k < 32768) continue;  /* fewer pages than a server's 128 MiB: not alike */
            k = 32768;  /* 128 MiB of pages, as a server's buffers */
            void **c = chain(pages, k);
            walk(&c, 0.05);  /* into the caches it can hold */
            for (int cpu = 0; cpu < 2; cpu++) {
                pin(cpu);
                printf("{\"mode\": \"map\", \"round\": %d, \"gib\": %zu, \"pages\": %zu, "
                       "\"cpu\": %d, \"ns\": %.2f}\n", round, g, k, cpu, walk(&c, secs));
            }
            fflush(stdout);
        }
    return 0;
}

static int fresh(size_t mib, int placements, double secs) {
    size_t bytes = mib << 20;
    area(bytes, 0);  /* a guard: a process's first large mapping walked 25-35% slower here */
    for (int i = 0; i < placements; i++) {  /* both buffers new, as two servers started */
        char *a = area(bytes, 0), *b = area(bytes, 0);
        void **ca = whole(a, bytes), **cb = whole(b, bytes);
        char pa[4096], pb[4096];
        placed("a", a, bytes, pa, sizeof pa);
        placed("b", b, bytes, pb, sizeof pb);
        for (int cpu = 0; cpu < 2; cpu++) {
            pin(cpu);
            double na = 0, nb = 0;
            for (int r = 0; r < 4; r++) {  /* A and B in turns, ABBA */
                if (r == 0 || r == 3) { na += walk(&ca, secs / 8); nb += walk(&cb, secs / 8); }
                else { nb += walk(&cb, secs / 8); na += walk(&ca, secs / 8); }
            }
            printf("{\"mode\": \"fresh\", \"placement\": %d, \"cpu\": %d, \"a_ns\": %.2f, "
                   "\"b_ns\": %.2f, %s, %s}\n", i, cpu, na / 4, nb / 4, pa, pb);
        }
        fflush(stdout);
        munmap(a, bytes);
        munmap(b, bytes);
    }
    return 0;
}

static int pair(size_t mib, double secs, double slice) {
    size_t bytes = mib << 20;
    area(bytes, 0);  /* the guard, as in fresh */
    char *a = area(bytes, 1), *b = area(bytes, 1);
    void **ca = whole(a, bytes), **cb = whole(b, bytes);
    char pa[4096], pb[4096];
    placed("a", a, bytes, pa, sizeof pa);
    placed("b", b, bytes, pb, sizeof pb);
    printf("{\"mode\": \"pair\", %s, %s}\n", pa, pb);
    fflush(stdout);
    double t0 = now();
    pid_t child = fork();
    int cpu = child == 0 ? 1 : 0;
    pin(cpu);
    while (now() - t0 < secs) {  /* each walker A then B; the other walker B then A */
        double first = walk(cpu ? &cb : &ca, slice), second = walk(cpu ? &ca : &cb, slice);
        printf("{\"mode\": \"pair\", \"t\": %.2f, \"cpu\": %d, \"a_ns\": %.2f, "
               "\"b_ns\": %.2f}\n", now() - t0, cpu, cpu ? second : first,
               cpu ? first : second);
        fflush(stdout);
    }
    if (child == 0) _exit(0);
    waitpid(child, NULL, 0);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 4 && !strcmp(argv[1], "map")) return map(atol(argv[2]), atof(argv[3]));
    if (argc >= 5 && !strcmp(argv[1], "fresh"))
        return fresh(atol(argv[2]), atoi(argv[3]), atof(argv[4]));
    if (argc >= 5 && !strcmp(argv[1], "pair"))
        return pair(atol(argv[2]), atof(argv[3]), atof(argv[4]) / 1000);
    fprintf(stderr, "usage: memory_chase map MIB SECONDS | fresh MIB PLACEMENTS SECONDS | "
            "pair MIB SECONDS SLICE_MS\n");
    return 2;
}
