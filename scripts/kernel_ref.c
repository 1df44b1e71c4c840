/* Reference AND + popcount loop for scripts/bench_kernel.py: the machine's limit for Dice pairs.
 * Compiled at run time with gcc -O3 -march=native into .bench/kernel_ref.so and called via ctypes.
 * For every pair (i, j) of packed rows (words uint64 each): c = popcount(a_i & b_j); the pair counts
 * when 2 * c >= t * (|a_i| + |b_j|), the same test as a Dice threshold. Returns the number of pairs
 * that pass (so the compiler cannot drop the work).
 */
#include <stdint.h>
#include <stdlib.h>

static int popcount_row(const uint64_t *r, int words) {
    int c = 0;
    for (int w = 0; w < words; w++) c += __builtin_popcountll(r[w]);
    return c;
}

long count_pairs(const uint64_t *a, long na, const uint64_t *b, long nb, int words, double t) {
    int *pb = malloc(sizeof(int) * (size_t)nb);
    long hits = 0;
    for (long j = 0; j < nb; j++) pb[j] = popcount_row(b + j * words, words);
    for (long i = 0; i < na; i++) {
        const uint64_t *ra = a + i * words;
        int pa = popcount_row(ra, words);
        for (long j = 0; j < nb; j++) {
            const uint64_t *rb = b + j * words;
            int c = 0;
            for (int w = 0; w < words; w++) c += __builtin_popcountll(ra[w] & rb[w]);
            if (2.0 * c >= t * (double)(pa + pb[j])) hits++;
        }
    }
    free(pb);
    return hits;
}
