/* The acceptance step of speculative sampling on the CPU, straight from fp32 logits (specnotes.sampling.kernel).

   For each sequence, position by position as the reference loop walks them: the log-normalizer
   lse = log sum exp(l / T) of the target's row and of the draft's, one pass over each; p(x) and q(x) as
   exp(l(x) / T - lse); accept x if u * q(x) < p(x). At the first rejection, one more pass over that position's
   two rows sums the weights max(0, p - q) over blocks of BLOCK tokens (after k acceptances, the bonus row's p),
   and the last token is drawn by inverse CDF: the block from those sums, then the token inside the one block, its
   weights computed again. No row of probabilities is written to memory.

   Two routes to that second pass; the caller picks one (KEEP in how: specnotes.sampling.fused.route, from the
   acceptance it expects). Recomputed: the two rows are exponentiated again from their logits. Kept: the first
   pass over each row also writes its exponentials to a buffer of the thread's, and the second pass reads them
   there, with no exp. The kept route saves nearly a pass over each row a sequence stops on and costs a little on
   each row it reads, so it wins where most drafts are rejected. Kept over recomputed, on a Zen 4 core (the C call
   alone, one thread, each call after a 73 MB copy as in the benchmark, medians of paired ratios of thread CPU
   time, B = 64, k = 4, V = 32,000), from draft logits / from the draft's probabilities, by the acceptance measured:
   0.48: 0.82 / 0.89; 0.75: 0.93 / 1.05; 0.88: 1.04 / 1.19; 0.94: 1.05 / 1.31; 1: 1.11 / 1.44. With the stores
   alone it lost (1.5x with every draft accepted, as when tried in issue 39): the hardware's prefetch fell behind
   the rows streamed from memory. Its loop now prefetches the row ahead and, with the draft's probabilities, the q
   row a rejection reads next (sum_exp); that q row is wasted on an acceptance, hence the lower threshold there.

   exp: 2^n * P(r), r = y - n ln 2 in [-ln2/2, ln2/2], P of degree 6 (relative error 7e-8 at float precision);
   0 below -87.3 (where a float exp would be denormal or 0), so a logit of -inf has weight 0, and a NaN stays a
   NaN. The loops over a row are written once for W floats at a time (vexp, sum_exp, sums_of), on AVX-512 (W = 16)
   or AVX2 with FMA (W = 8); elsewhere the compiler vectorizes exp_fast in plain loops. A row's sum is taken
   unshifted, exp(l / T): where it lies in [1, 1e38) no term overflowed and a term that flushed to 0 was below
   1e-38 of the sum; otherwise the row is summed again with its largest logit subtracted before the scaling (type
   norm). A sum adds CHUNK tokens in float and the chunks in double, so its error does not grow with V. Whether the
   exponentials or the reads bound the pass over a row depends on the CPU and the thread count (bench_sampler.json
   says which). */
#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#define LO (-87.33654f)
#define HI 88.0f
#define BLOCK 128 /* tokens per block of the two-level inverse CDF, as specnotes.sampling.exact.BLOCK */
#define AHEAD 2048 /* floats ahead of a kept row's pass that it prefetches (see sum_exp) */
#define CHUNK 512 /* tokens a row's sum adds in float before a running sum in double takes them */
#define MAGIC 12583039.0f /* 1.5 * 2^23 + 127: t = y log2(e) + MAGIC holds n + 127 in its low mantissa bits */

static inline float exp_fast(float y) {
    float c = y < LO ? LO : y; /* as maxps(LO, y) and minps(HI, c): a NaN stays a NaN */
    c = c > HI ? HI : c;
    float t = c * 1.44269504f + MAGIC;
    float n = t - MAGIC;
    float r = c - n * 0.693145751953125f;
    r = r - n * 1.428606765330187e-06f;
    float p = 0.001381461275741458f;
    p = p * r + 0.008368710055947304f;
    p = p * r + 0.04166838899254799f;
    p = p * r + 0.1666652113199234f;
    p = p * r + 0.4999999403953552f;
    p = p * (r * r) + r + 1.0f;
    uint32_t bits; /* unsigned: the shift moves n + 127 into the exponent field, past the sign bit */
    memcpy(&bits, &t, 4);
    bits <<= 23;
    float scale;
    memcpy(&scale, &bits, 4);
    return y < LO ? 0.0f : p * scale;
}

/* How a row is normalized: p(i) = exp((l(i) - m) / T - c). m = 0 where the row's unshifted sum lies in [1, 1e38);
   otherwise m is the row's largest logit, subtracted before the scaling, so that (l - m) / T is exact to rounding
   even where l / T itself is far from 0 (near 1e6 at T = 1e-4 with logits near 100, where a float's step is 0.06).
   s > 0 where the weights are read from a row of numbers x that are not logits, as p(i) = s x(i): the draft's own
   probabilities (s = 1), or a row's kept exponentials x(i) = exp((l(i) - m) / T) (s = exp(-c)). */
typedef struct {
    float m, c, s;
} norm;

/* The loops over a row, W floats at a time, where the CPU has AVX-512 (W = 16; 2^n applied by vscalefps, which
   gives 0 or a denormal far below -87 and +inf past 88.7, so the one clamp, at -104, only keeps -inf from making
   r a NaN) or AVX2 with FMA (W = 8; exp_fast's own clamps and bit shift). Operands are ordered so that a NaN
   logit stays a NaN. Elsewhere the compiler vectorizes the plain loops further down. */
#if defined(__AVX512F__)
#include <immintrin.h>
#define W 16
typedef __m512 vec;
static inline vec vset(float x) { return _mm512_set1_ps(x); }
static inline vec vload(const float *x) { return _mm512_loadu_ps(x); }
static inline void vstore(float *x, vec a) { _mm512_storeu_ps(x, a); }
static inline vec vadd(vec a, vec b) { return _mm512_add_ps(a, b); }
static inline vec vsub(vec a, vec b) { return _mm512_sub_ps(a, b); }
static inline vec vmul(vec a, vec b) { return _mm512_mul_ps(a, b); }
static inline vec vmax(vec a, vec b) { return _mm512_max_ps(a, b); }
static inline vec vfma(vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); }
static inline vec vfms(vec a, vec b, vec c) { return _mm512_fmsub_ps(a, b, c); }
static inline vec vfnma(vec a, vec b, vec c) { return _mm512_fnmadd_ps(a, b, c); }
static inline float vsum(vec a) { return _mm512_reduce_add_ps(a); }
static inline vec vexp_scale(vec p, vec n, vec t, vec y) {
    (void)t, (void)y;
    return _mm512_scalef_ps(p, n);
}
static inline vec vexp_clamp(vec y) { return _mm512_max_ps(vset(-104.0f), y); }
#define VECTOR 1
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define W 8
typedef __m256 vec;
static inline vec vset(float x) { return _mm256_set1_ps(x); }
static inline vec vload(const float *x) { return _mm256_loadu_ps(x); }
static inline void vstore(float *x, vec a) { _mm256_storeu_ps(x, a); }
static inline vec vadd(vec a, vec b) { return _mm256_add_ps(a, b); }
static inline vec vsub(vec a, vec b) { return _mm256_sub_ps(a, b); }
static inline vec vmul(vec a, vec b) { return _mm256_mul_ps(a, b); }
static inline vec vmax(vec a, vec b) { return _mm256_max_ps(a, b); }
static inline vec vfma(vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); }
static inline vec vfms(vec a, vec b, vec c) { return _mm256_fmsub_ps(a, b, c); }
static inline vec vfnma(vec a, vec b, vec c) { return _mm256_fnmadd_ps(a, b, c); }
static inline float vsum(vec a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
static inline vec vexp_scale(vec p, vec n, vec t, vec y) {
    (void)n;
    p = _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(t), 23)));
    return _mm256_and_ps(p, _mm256_cmp_ps(y, vset(LO), _CMP_NLT_UQ)); /* 0 below LO; a NaN passes */
}
static inline vec vexp_clamp(vec y) { return _mm256_min_ps(vset(HI), _mm256_max_ps(vset(LO), y)); }
#define VECTOR 1
#endif

#ifdef VECTOR
/* exp_fast on W floats. */
static inline vec vexp(vec y) {
    vec c = vexp_clamp(y);
    vec t = vfma(c, vset(1.44269504f), vset(MAGIC));
    vec n = vsub(t, vset(MAGIC));
    vec r = vfnma(n, vset(0.693145751953125f), c);
    r = vfnma(n, vset(1.428606765330187e-06f), r);
    vec p = vset(0.001381461275741458f);
    p = vfma(p, r, vset(0.008368710055947304f));
    p = vfma(p, r, vset(0.04166838899254799f));
    p = vfma(p, r, vset(0.1666652113199234f));
    p = vfma(p, r, vset(0.4999999403953552f));
    p = vadd(vfma(p, vmul(r, r), r), vset(1.0f));
    return vexp_scale(p, n, t, y);
}

/* The sum of exp((x - m) / T) over a row: CHUNK tokens at a time in float (two accumulators of W lanes), the chunks
   in double, so that the error does not grow with V; the last few tokens one at a time. Where keep is not 0, each
   term is also written to keep[i], and the loop prefetches the row AHEAD floats on (past its end too: the next
   position's row follows it), and next[i], a row to be read once this one is done: with the stores, the
   hardware's prefetch fell behind, and a pass over a row in memory took 1.8x as long (Zen 4; 1.25x with these). */
static inline __attribute__((always_inline)) double sum_exp(const float *x, int64_t V, float inv_t, float m,
                                                            float *keep, const float *next) {
    vec scale = vset(inv_t), by = vset(m);
    double s = 0.0;
    int64_t i = 0;
    while (i + 2 * W <= V) {
        vec s0 = vset(0.0f), s1 = vset(0.0f);
        for (int64_t end = i + CHUNK < V ? i + CHUNK : V; i + 2 * W <= end; i += 2 * W) {
            vec e0 = vexp(vmul(vsub(vload(x + i), by), scale)), e1 = vexp(vmul(vsub(vload(x + i + W), by), scale));
            if (keep) {
                vstore(keep + i, e0), vstore(keep + i + W, e1);
                for (int l = 0; l < 2 * W; l += 16) {
                    __builtin_prefetch((const void *)((uintptr_t)(x + i + l) + 4 * AHEAD), 0, 2);
                    if (next) __builtin_prefetch(next + i + l, 0, 2);
                }
            }
            s0 = vadd(s0, e0);
            s1 = vadd(s1, e1);
        }
        s += vsum(vadd(s0, s1));
    }
    for (; i < V; i++) {
        float e = exp_fast((x[i] - m) * inv_t);
        if (keep) keep[i] = e;
        s += e;
    }
    return s;
}
#else
static inline __attribute__((always_inline)) double sum_exp(const float *x, int64_t V, float inv_t, float m,
                                                            float *keep, const float *next) {
    (void)next;
    double s = 0.0;
    for (int64_t lo = 0; lo < V; lo += CHUNK) {
        int64_t hi = lo + CHUNK < V ? lo + CHUNK : V;
        float c = 0.0f;
        if (keep) {
#pragma omp simd reduction(+ : c)
            for (int64_t i = lo; i < hi; i++) c += keep[i] = exp_fast((x[i] - m) * inv_t);
        } else {
#pragma omp simd reduction(+ : c)
            for (int64_t i = lo; i < hi; i++) c += exp_fast((x[i] - m) * inv_t);
        }
        s += c;
    }
    return s;
}
#endif

static float max_of(const float *x, int64_t V) {
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (int64_t i = 0; i < V; i++) m = x[i] > m ? x[i] : m;
    return m;
}

/* The row's normalizer; its exponentials kept in keep[V] where keep is not 0 (those of the shifted sum if it was
   summed again), next prefetched as in sum_exp. */
static norm lse(const float *x, int64_t V, float inv_t, float *keep, const float *next) {
    double s = sum_exp(x, V, inv_t, 0.0f, keep, next);
    if (s >= 1.0 && s < 1e38) return (norm){0.0f, (float)log(s)};
    float m = max_of(x, V);
    return (norm){m, (float)log(sum_exp(x, V, inv_t, m, keep, 0))}; /* not finite for a NaN, +inf, or no finite logit */
}

static inline int normalized(norm n) { return isfinite(n.m) && isfinite(n.c); }

/* out[j] = log sum exp(x[j] / T) of each row of x [rows, V]. */
void log_normalizers(const float *x, int64_t rows, int64_t V, float inv_t, int threads, float *out) {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t j = 0; j < rows; j++) {
        norm n = lse(x + j * V, V, inv_t, 0, 0);
        out[j] = (float)((double)n.m * inv_t + n.c);
    }
}

/* The weight of token i of the row a sequence stopped on: max(0, p - q), or p where there is no q; each of p and q
   from its logits, or read as s x (norm). */
static inline float weight(const float *p, norm np, const float *q, norm nq, float inv_t, int64_t i) {
    float w = np.s > 0.0f ? np.s * p[i] : exp_fast((p[i] - np.m) * inv_t - np.c);
    if (q) w -= nq.s > 0.0f ? nq.s * q[i] : exp_fast((q[i] - nq.m) * inv_t - nq.c);
    return w > 0.0f ? w : 0.0f;
}

/* sums[c] = the weights of tokens [c BLOCK, (c + 1) BLOCK) summed. The kinds of row: p 0 from logits, 1 read as
   s x; q 0 none, 1 read as s x, 2 from logits. */
#ifdef VECTOR
/* The weights of tokens [i, i + W). */
static inline __attribute__((always_inline)) vec weights_at(const float *p, const float *q, int64_t i, int pk, int qk,
                                                            vec scale, vec mp, vec cp, vec sp, vec mq, vec cq, vec sq) {
    vec w = pk ? vmul(vload(p + i), sp) : vexp(vfms(vsub(vload(p + i), mp), scale, cp));
    if (qk == 0) return w;
    vec x = vload(q + i);
    return vmax(vsub(w, qk == 1 ? vmul(x, sq) : vexp(vfms(vsub(x, mq), scale, cq))), vset(0.0f));
}

static inline __attribute__((always_inline)) void sums_of(const float *p, norm np, const float *q, norm nq, int pk,
                                                          int qk, int64_t V, float inv_t, float *sums) {
    vec scale = vset(inv_t), mp = vset(np.m), cp = vset(np.c), sp = vset(np.s);
    vec mq = vset(nq.m), cq = vset(nq.c), sq = vset(nq.s);
    for (int64_t lo = 0, c = 0; lo < V; lo += BLOCK, c++) {
        int64_t hi = lo + BLOCK < V ? lo + BLOCK : V, i = lo;
        vec s0 = vset(0.0f), s1 = vset(0.0f);
        for (; i + 2 * W <= hi; i += 2 * W) {
            s0 = vadd(s0, weights_at(p, q, i, pk, qk, scale, mp, cp, sp, mq, cq, sq));
            s1 = vadd(s1, weights_at(p, q, i + W, pk, qk, scale, mp, cp, sp, mq, cq, sq));
        }
        float s = vsum(vadd(s0, s1));
        for (; i < hi; i++) s += weight(p, np, q, nq, inv_t, i);
        sums[c] = s;
    }
}

static void block_sums(const float *p, norm np, const float *q, norm nq, int64_t V, float inv_t, float *sums) {
    if (!q) sums_of(p, np, q, nq, 0, 0, V, inv_t, sums);
    else if (np.s > 0.0f) sums_of(p, np, q, nq, 1, 1, V, inv_t, sums); /* the kept route: q is read as s x too */
    else if (nq.s > 0.0f) sums_of(p, np, q, nq, 0, 1, V, inv_t, sums);
    else sums_of(p, np, q, nq, 0, 2, V, inv_t, sums);
}
#else
/* one loop per kind, so that each is vectorized */
static void block_sums(const float *p, norm np, const float *q, norm nq, int64_t V, float inv_t, float *sums) {
    norm n0 = {np.m, np.c, 0.0f}, n1 = {nq.m, nq.c, 1.0f};
    for (int64_t lo = 0, c = 0; lo < V; lo += BLOCK, c++) {
        int64_t hi = lo + BLOCK < V ? lo + BLOCK : V;
        float s = 0.0f;
        if (!q) {
#pragma omp simd reduction(+ : s)
            for (int64_t i = lo; i < hi; i++) s += weight(p, n0, 0, nq, inv_t, i);
        } else if (np.s > 0.0f) {
#pragma omp simd reduction(+ : s)
            for (int64_t i = lo; i < hi; i++) s += weight(p, np, q, nq, inv_t, i);
        } else if (nq.s > 0.0f) {
#pragma omp simd reduction(+ : s)
            for (int64_t i = lo; i < hi; i++) s += weight(p, n0, q, n1, inv_t, i);
        } else {
#pragma omp simd reduction(+ : s)
            for (int64_t i = lo; i < hi; i++) s += weight(p, n0, q, nq, inv_t, i);
        }
        sums[c] = s;
    }
}

#endif

/* The token whose cumulative weight first passes v times the total, never one of weight 0: the block by the
   block sums, then the token inside it. Inside, the weights are summed in order, not as the vector loop summed
   them, so the rest is scaled to that sum; a block that rounding left with no weight is searched as a whole row.
   -1 if the row has no weight at all. */
static int64_t draw(const float *p, norm np, const float *q, norm nq, float inv_t, int64_t V,
                    const float *sums, float v) {
    int64_t nb = (V + BLOCK - 1) / BLOCK, j = -1, lo = 0, hi = V;
    double total = 0.0, before = 0.0;
    for (int64_t b = 0; b < nb; b++) total += sums[b];
    if (!(total > 0.0)) return -1;
    double goal = v * total;
    for (int64_t b = 0; b < nb; b++) {
        if (sums[b] > 0.0f) {
            j = b;
            if (before + sums[b] > goal) break;
        }
        before += sums[b];
    }
    double inside = 0.0, rest;
    lo = j * BLOCK;
    hi = lo + BLOCK < V ? lo + BLOCK : V;
    for (int64_t i = lo; i < hi; i++) inside += weight(p, np, q, nq, inv_t, i);
    if (inside > 0.0) {
        rest = (goal - before) * inside / sums[j];
    } else {
        lo = 0, hi = V, inside = 0.0;
        for (int64_t i = 0; i < V; i++) inside += weight(p, np, q, nq, inv_t, i);
        rest = v * inside;
    }
    int64_t last = -1;
    double seen = 0.0;
    for (int64_t i = lo; i < hi; i++) {
        float w = weight(p, np, q, nq, inv_t, i);
        if (w > 0.0f) {
            last = i;
            seen += w;
            if (seen > rest) return i;
        }
    }
    return last;
}

#define Q_PROBS 1 /* how: the draft's rows are its probabilities, not logits */
#define KEEP 2    /* how: the kept route */
#define LAYOUT 4  /* how: token is [B, k + 1], laid out as speculative_sample's tokens */

/* For each of the B sequences of target [B, k + 1, V] and draft [B, k, V] (logits, or probabilities if how has
   Q_PROBS), drafted tokens [B, k], uniforms u [B, k] for the tests and v [B] for the last token: the drafts accepted,
   accepted[b], and the last token, token[b], drawn from max(0, p - q) at the first rejection (from p itself where
   that has no weight left: p = q up to rounding), or from the bonus row's p after k acceptances. accepted[b] is
   -1 where a drafted token lies outside [0, V), where a row it read has no finite normalizer (a NaN or +inf logit,
   or no finite one), or where memory for the block sums ran out: the caller then takes another path. The
   sequences are shared among the threads one at a time, as each finishes (they stop at different positions).
   With KEEP (the kept route), the first pass over each row of logits also writes its exponentials to a buffer of
   the thread's, and the residual is read from there with no exp; else the rows a sequence stops on are
   exponentiated again. The tests are the same either way; a last token may differ where rounding moves it.
   With LAYOUT, row b of token [B, k + 1] gets the drafts accepted, then the last token (the rest is left as it
   was: the caller fills it with -1). Returns how many sequences were handed back. */
int64_t accept_step(const float *target, const float *draft, int how, const int64_t *tokens, const float *u,
                    const float *v, int64_t B, int64_t k, int64_t V, float inv_t, int threads,
                    int64_t *accepted, int64_t *token) {
    int64_t nb = (V + BLOCK - 1) / BLOCK, q_probs = how & Q_PROBS, keep = how & KEEP, handed = 0;
#pragma omp parallel num_threads(threads)
    {
        float *sums = malloc(nb * sizeof(float));
        float *kept = keep ? malloc((q_probs ? 1 : 2) * V * sizeof(float)) : 0; /* p's exponentials, then q's */
#pragma omp for schedule(dynamic, 1)
        for (int64_t b = 0; b < B; b++) {
            int outside = 0;
            for (int64_t n = 0; n < k; n++) outside |= tokens[b * k + n] < 0 || tokens[b * k + n] >= V;
            if (!sums || (keep && !kept) || outside) {
                accepted[b] = -1;
                continue;
            }
            const float *p = 0, *q = 0;
            norm np = {0.0f, 0.0f, 0.0f}, nq = {0.0f, 0.0f, q_probs ? 1.0f : 0.0f};
            int64_t n = 0;
            for (; n < k; n++) {
                p = target + (b * (k + 1) + n) * V;
                q = draft + (b * k + n) * V;
                int64_t x = tokens[b * k + n];
                np = lse(p, V, inv_t, kept, kept && q_probs ? q : 0);
                if (!q_probs) nq = lse(q, V, inv_t, kept ? kept + V : 0, 0);
                if (!normalized(np) || !normalized(nq)) break;
                float px = expf((p[x] - np.m) * inv_t - np.c);
                float qx = q_probs ? q[x] : expf((q[x] - nq.m) * inv_t - nq.c);
                if (!(u[b * k + n] * qx < px)) break;
            }
            int summed = 0;
            int64_t last = -1;
            if (n == k) { /* the bonus row: its weights exp(l / T) need no normalizer where their sum lies in
                             [1, 1e38) (as in lse); elsewhere they are normalized by it */
                p = target + (b * (k + 1) + k) * V;
                q = 0;
                np = nq = (norm){0.0f, 0.0f, 0.0f};
                block_sums(p, np, q, nq, V, inv_t, sums);
                double total = 0.0;
                for (int64_t c = 0; c < nb; c++) total += sums[c];
                summed = total >= 1.0 && total < 1e38;
                if (!summed) np = lse(p, V, inv_t, 0, 0);
            }
            accepted[b] = normalized(np) && normalized(nq) ? n : -1;
            if (accepted[b] < 0) continue;
            if (kept && n < k) { /* p = s e, s = exp(-c), from the exponentials e its sum took */
                p = kept, np.s = expf(-np.c);
                if (!q_probs) q = kept + V, nq.s = expf(-nq.c);
            }
            for (int64_t t = 0; t < 2; t++) { /* the residual; then p itself if the residual has no weight */
                if (!summed || t > 0) block_sums(p, np, q, nq, V, inv_t, sums);
                last = draw(p, np, q, nq, inv_t, V, sums, v[b]);
                if (last >= 0 || !q) break;
                q = 0;
                p = target + (b * (k + 1) + n) * V, np.s = 0.0f;
            }
            if (!(how & LAYOUT)) {
                token[b] = last;
                continue;
            }
            for (int64_t j = 0; j < n; j++) token[b * (k + 1) + j] = tokens[b * k + j];
            token[b * (k + 1) + n] = last;
        }
        free(sums);
        free(kept);
    }
    for (int64_t b = 0; b < B; b++) handed += accepted[b] < 0;
    return handed;
}
