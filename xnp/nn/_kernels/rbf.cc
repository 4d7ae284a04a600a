// The RBF attention bias and its gradient, as XLA FFI handlers for the CPU.
//
// The bias of head h between query q and key k is
//     B[b,h,q,k] = sum_f a[h,f] * exp(-b[h,f] * z[b,q,k])          ("xnp_rbf_bias"),
// and for its cotangent g[b,h,q,k] the gradient is
//     da[h,f] = sum_{b,q,k} g * e
//     db[h,f] = -a[h,f] * sum_{b,q,k} g * e * z
//     dz[b,q,k] = -sum_{h,f} a[h,f] * b[h,f] * g * e        (only "xnp_rbf_grad_dz")
// with e = exp(-b[h,f] * z[b,q,k]).  Each is one pass over the tile that evaluates
// each exponential once.  (XLA computes the gradient as separate loops over the
// tile, one per basis function and sum, each recomputing its exponentials.)
//
// Rows (b, q) are split into blocks that depend only on the shapes; the threads of
// XLA's intra-op pool take blocks, and the gradient's per-block sums are added in
// block order in double precision, so results do not depend on the number of
// threads or their timing.
//
// Compiled on first use by xnp/nn/native.py with -march=native; the vector type
// below is lowered to whatever the machine has (AVX-512, AVX2, NEON, ...).

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// Floats per vector: one register of the widest unit the compiler targets (-march=native):
// 16 with AVX-512; 8 otherwise (one AVX2 register, two SSE or NEON ones).  On an AVX2
// machine 16 lanes made every vector two registers and the kernels slower than XLA's.
#if defined(__AVX512F__)
constexpr int64_t kLanes = 16;
#else
constexpr int64_t kLanes = 8;
#endif
typedef float vf __attribute__((vector_size(kLanes * sizeof(float))));
typedef int32_t vi __attribute__((vector_size(kLanes * sizeof(int32_t))));

inline vf splat(float x) { return vf{} + x; }

inline vf load(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline void store(float* p, vf v) { std::memcpy(p, &v, sizeof v); }

inline double hsum(vf v) {
  double s = 0.0;
  for (int64_t i = 0; i < kLanes; ++i) s += v[i];
  return s;
}

// exp(x) for x <= 0: 2^n * 2^r with n = round(x / ln 2), |r| <= 1/2, and a
// degree-6 minimax polynomial for 2^r (relative error below 2.5e-7).  Arguments
// below -87 are clamped (the result, about 1.6e-38, is then not 0 but as good).
inline vf exp_nonpositive(vf x) {
  x = x < -87.0f ? splat(-87.0f) : x;
  const vf t = x * 1.44269504088896341f;
  const vf n = (t + 12582912.0f) - 12582912.0f;  // round to nearest, |t| < 2^22
  const vf r = t - n;
  vf p = splat(1.535336188319500e-4f);
  p = p * r + 1.339887440266574e-3f;
  p = p * r + 9.618437357674640e-3f;
  p = p * r + 5.550332471162809e-2f;
  p = p * r + 2.402264791363012e-1f;
  p = p * r + 6.931472028550421e-1f;
  p = p * r + 1.0f;
  const vi bits = (__builtin_convertvector(n, vi) + 127) << 23;
  vf scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

constexpr int64_t kMaxBasis = 16;

struct Shapes {
  int64_t batch, heads, queries, keys, basis;
};

// Sums over rows [row0, row1) of the flattened (b, q) axis into sums[h][f][0..1]
// (sum of g*e and of g*e*z); writes dz for those rows when it is not null.
void rows_block(const Shapes& s, const float* g, const float* z, const float* neg_b,
                const float* c, float* dz, int64_t row0, int64_t row1, double* sums) {
  const int64_t K = s.keys, F = s.basis, Q = s.queries;
  const int64_t full = K - K % kLanes;
  for (int64_t row = row0; row < row1; ++row) {
    const int64_t bi = row / Q, qi = row % Q;
    const float* zr = z + row * K;
    float* dzr = dz == nullptr ? nullptr : dz + row * K;
    for (int64_t h = 0; h < s.heads; ++h) {
      const float* gr = g + ((bi * s.heads + h) * Q + qi) * K;
      vf acc_e[kMaxBasis], acc_ez[kMaxBasis];
      for (int64_t f = 0; f < F; ++f) acc_e[f] = acc_ez[f] = vf{};
      auto lanes = [&](vf zz, vf gg, float* dz_out, int64_t n) {
        vf dzv = vf{};
        for (int64_t f = 0; f < F; ++f) {
          const vf ge = gg * exp_nonpositive(zz * neg_b[h * F + f]);
          acc_e[f] += ge;
          acc_ez[f] += ge * zz;
          dzv += ge * c[h * F + f];
        }
        if (dz_out != nullptr) {
          if (h == 0) {
            std::memcpy(dz_out, &dzv, n * sizeof(float));
          } else {
            for (int64_t i = 0; i < n; ++i) dz_out[i] += dzv[i];
          }
        }
      };
      for (int64_t k = 0; k < full; k += kLanes) {
        lanes(load(zr + k), load(gr + k), dzr == nullptr ? nullptr : dzr + k, kLanes);
      }
      if (full < K) {  // the last partial vector: zero cotangent beyond the row
        const int64_t n = K - full;
        vf zz = vf{}, gg = vf{};
        std::memcpy(&zz, zr + full, n * sizeof(float));
        std::memcpy(&gg, gr + full, n * sizeof(float));
        lanes(zz, gg, dzr == nullptr ? nullptr : dzr + full, n);
      }
      double* out = sums + h * F * 2;
      for (int64_t f = 0; f < F; ++f) {
        out[2 * f] += hsum(acc_e[f]);
        out[2 * f + 1] += hsum(acc_ez[f]);
      }
    }
  }
}

// Runs task(i) for i in [0, n) on the intra-op pool and the calling thread; returns
// when all are done.  The caller takes tasks too, so it never waits on a pool that
// has no free thread.  An exception in a task (out of memory) is rethrown here, in
// the caller, once all tasks are done.
template <typename Task>
void parallel_for(ffi::ThreadPool& pool, int64_t n, const Task& task) {
  struct State {
    std::atomic<int64_t> next{0}, done{0};
    std::mutex mutex;
    std::condition_variable cv;
    std::exception_ptr error;
  };
  auto state = std::make_shared<State>();
  const Task* body = &task;
  // Workers touch `body` only while a task is left, i.e. before this returns.
  auto work = [state, body, n]() {
    for (int64_t i; (i = state->next.fetch_add(1)) < n;) {
      try {
        (*body)(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(state->mutex);
        if (!state->error) state->error = std::current_exception();
      }
      if (state->done.fetch_add(1) + 1 == n) {
        std::lock_guard<std::mutex> lock(state->mutex);
        state->cv.notify_all();
      }
    }
  };
  const int64_t helpers = std::min<int64_t>(pool.num_threads(), n - 1);
  try {
    for (int64_t t = 0; t < helpers; ++t) pool.Schedule(decltype(work)(work));
  } catch (...) {
    // fewer helpers (out of memory while scheduling): the caller's share grows
  }
  work();
  std::unique_lock<std::mutex> lock(state->mutex);
  state->cv.wait(lock, [&] { return state->done.load() == n; });
  if (state->error) std::rethrow_exception(state->error);
}

// Rows of a [rows, keys] tile per block, and the number of blocks: about 16 KiB of
// keys a block and at most 64 blocks, enough to balance two to a few dozen threads
// and few enough that the per-block sums cost nothing.  Depends on the shapes only.
struct RowBlocks {
  int64_t per_block, blocks;
};

RowBlocks row_blocks(int64_t rows, int64_t keys) {
  const int64_t per_block =
      std::max<int64_t>({1, 4096 / std::max<int64_t>(keys, 1), (rows + 63) / 64});
  return {per_block, rows == 0 ? 0 : (rows + per_block - 1) / per_block};
}

// Out of memory (or another C++ exception) inside a handler becomes an error XLA
// reports, not a crash.
ffi::Error out_of_memory(const char* name) {
  return ffi::Error(ffi::ErrorCode::kResourceExhausted, std::string(name) + ": out of memory");
}

ffi::Error internal_error(const char* name, const std::exception& err) {
  return ffi::Error(ffi::ErrorCode::kInternal, std::string(name) + ": " + err.what());
}

ffi::Error rbf_grad(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> g, ffi::Buffer<ffi::F32> z,
                    ffi::Buffer<ffi::F32> a, ffi::Buffer<ffi::F32> b,
                    ffi::ResultBuffer<ffi::F32> da, ffi::ResultBuffer<ffi::F32> db, float* dz) {
  try {
    const auto gd = g.dimensions();
    const auto zd = z.dimensions();
    const auto ad = a.dimensions();
    if (gd.size() != 4 || zd.size() != 3 || ad.size() != 2 || b.dimensions().size() != 2) {
      return ffi::Error::InvalidArgument("xnp_rbf_grad: expected g[B,H,Q,K], z[B,Q,K], a/b[H,F]");
    }
    const Shapes s{gd[0], gd[1], gd[2], gd[3], ad[1]};
    if (zd[0] != s.batch || zd[1] != s.queries || zd[2] != s.keys || ad[0] != s.heads ||
        b.dimensions()[0] != s.heads || b.dimensions()[1] != s.basis) {
      return ffi::Error::InvalidArgument("xnp_rbf_grad: inconsistent shapes");
    }
    if (s.basis > kMaxBasis) {
      return ffi::Error::InvalidArgument("xnp_rbf_grad: more than 16 basis functions");
    }
    const int64_t HF = s.heads * s.basis;
    std::vector<float> neg_b(HF), c(HF);
    for (int64_t i = 0; i < HF; ++i) {
      neg_b[i] = -b.typed_data()[i];
      c[i] = -a.typed_data()[i] * b.typed_data()[i];
    }
    const int64_t rows = s.batch * s.queries;
    const RowBlocks rb = row_blocks(rows, s.keys);
    const int64_t per_block = rb.per_block, blocks = rb.blocks;
    std::vector<double> sums(blocks * HF * 2, 0.0);
    const float* gp = g.typed_data();
    const float* zp = z.typed_data();
    auto task = [&](int64_t i) {
      const int64_t r0 = i * per_block, r1 = std::min(rows, r0 + per_block);
      rows_block(s, gp, zp, neg_b.data(), c.data(), dz, r0, r1, sums.data() + i * HF * 2);
    };
    parallel_for(pool, blocks, task);
    for (int64_t i = 0; i < HF; ++i) {
      double se = 0.0, sez = 0.0;
      for (int64_t blk = 0; blk < blocks; ++blk) {
        se += sums[blk * HF * 2 + 2 * i];
        sez += sums[blk * HF * 2 + 2 * i + 1];
      }
      da->typed_data()[i] = static_cast<float>(se);
      db->typed_data()[i] = static_cast<float>(-a.typed_data()[i] * sez);
    }
    return ffi::Error::Success();
  } catch (const std::bad_alloc&) {
    return out_of_memory("xnp_rbf_grad");
  } catch (const std::exception& err) {
    return internal_error("xnp_rbf_grad", err);
  }
}

// The bias itself, out[b,h,q,k] = sum_f a[h,f] * exp(-b[h,f] * z[b,q,k]).
ffi::Error rbf_bias(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> z, ffi::Buffer<ffi::F32> a,
                    ffi::Buffer<ffi::F32> b, ffi::ResultBuffer<ffi::F32> out) {
  try {
    const auto zd = z.dimensions();
    const auto ad = a.dimensions();
    if (zd.size() != 3 || ad.size() != 2 || b.dimensions().size() != 2 ||
        b.dimensions()[0] != ad[0] || b.dimensions()[1] != ad[1]) {
      return ffi::Error::InvalidArgument("xnp_rbf_bias: expected z[B,Q,K], a/b[H,F]");
    }
    const Shapes s{zd[0], ad[0], zd[1], zd[2], ad[1]};
    if (s.basis > kMaxBasis) {
      return ffi::Error::InvalidArgument("xnp_rbf_bias: more than 16 basis functions");
    }
    const int64_t HF = s.heads * s.basis, K = s.keys, Q = s.queries, F = s.basis;
    std::vector<float> neg_b(HF), av(HF);
    for (int64_t i = 0; i < HF; ++i) {
      neg_b[i] = -b.typed_data()[i];
      av[i] = a.typed_data()[i];
    }
    const int64_t rows = s.batch * Q;
    const RowBlocks rb = row_blocks(rows, K);
    const int64_t per_block = rb.per_block, blocks = rb.blocks;
    const float* zp = z.typed_data();
    float* op = out->typed_data();
    const int64_t full = K - K % kLanes;
    auto task = [&](int64_t i) {
      const int64_t r1 = std::min(rows, (i + 1) * per_block);
      for (int64_t row = i * per_block; row < r1; ++row) {
        const int64_t bi = row / Q, qi = row % Q;
        const float* zr = zp + row * K;
        for (int64_t h = 0; h < s.heads; ++h) {
          float* orow = op + ((bi * s.heads + h) * Q + qi) * K;
          auto lanes = [&](vf zz) {
            vf acc = vf{};
            for (int64_t f = 0; f < F; ++f) {
              acc += av[h * F + f] * exp_nonpositive(zz * neg_b[h * F + f]);
            }
            return acc;
          };
          for (int64_t k = 0; k < full; k += kLanes) store(orow + k, lanes(load(zr + k)));
          if (full < K) {
            vf zz = vf{};
            std::memcpy(&zz, zr + full, (K - full) * sizeof(float));
            const vf acc = lanes(zz);
            std::memcpy(orow + full, &acc, (K - full) * sizeof(float));
          }
        }
      }
    };
    parallel_for(pool, blocks, task);
    return ffi::Error::Success();
  } catch (const std::bad_alloc&) {
    return out_of_memory("xnp_rbf_bias");
  } catch (const std::exception& err) {
    return internal_error("xnp_rbf_bias", err);
  }
}

ffi::Error rbf_grad_no_dz(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> g, ffi::Buffer<ffi::F32> z,
                          ffi::Buffer<ffi::F32> a, ffi::Buffer<ffi::F32> b,
                          ffi::ResultBuffer<ffi::F32> da, ffi::ResultBuffer<ffi::F32> db) {
  return rbf_grad(pool, g, z, a, b, da, db, nullptr);
}

ffi::Error rbf_grad_dz(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> g, ffi::Buffer<ffi::F32> z,
                       ffi::Buffer<ffi::F32> a, ffi::Buffer<ffi::F32> b,
                       ffi::ResultBuffer<ffi::F32> da, ffi::ResultBuffer<ffi::F32> db,
                       ffi::ResultBuffer<ffi::F32> dz) {
  return rbf_grad(pool, g, z, a, b, da, db, dz->typed_data());
}


// ---------------------------------------------------------------------------
// Fused biased attention, forward: for every batch element b, head h and query i,
//     s_ij = q_i . k_j / sqrt(D) + B_h(i, j)       (keys j with mask 1)
//     out_i = sum_j softmax_j(s_ij) v_j,   lse_i = log sum_j exp(s_ij)
// with the RBF bias B_h of the spatial distance (great-circle or Euclidean) and
// of the time difference, computed from per-point features inside the loop.  No
// score, bias or distance matrix is written to memory: a block of queries walks
// over the keys in tiles (online softmax, as FlashAttention), and the distances
// of a tile are computed once and shared by all heads.  A query with no valid key
// gets a zero output and lse = +inf (as xnp.nn.attention).

constexpr int64_t kRows = 8;     // queries per block
constexpr int64_t kTile = 256;   // keys per tile at most (a multiple of kLanes)
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// arcsin(sqrt(u)) / sqrt(u) = 1 + u * P(u) on [0, 1/2] (coefficients of
// xnp.geo.distance._ASIN_RATIO)
constexpr float kAsin[8] = {0.16666627f, 0.07502463f,  0.04412134f,  0.0356585f,
                            -0.00657315f, 0.10670699f, -0.13540055f, 0.12378763f};

// exp(x) for x <= 0, exactly 0 below -87 (masked and far-away terms)
inline vf exp_or_zero(vf x) {
  const vf e = exp_nonpositive(x);
  return x < -87.0f ? vf{} : e;
}

struct AttnShapes {
  int64_t batch, nq, nk, heads, d, dv, cs, fs, ft;
  int64_t tile;  // keys per tile: kTile, or fewer keys rounded up to whole vectors
  int64_t nkp;   // keys padded to a multiple of the tile (padding is masked)
};

enum Metric : int32_t { kNone = 0, kEuclidean = 1, kGreatCircle = 2 };

// Key-side arrays are copied once per call into padded, per-head layouts whose
// inner loops read contiguous memory: keys transposed [B, H, D, Nkp], values
// [B, H, Nkp, Dv], features transposed [B, C, Nkp], times [B, Nkp], mask [B, Nkp].
struct AttnArgs {
  AttnShapes s;
  int32_t metric;
  bool time;
  float gc_scale2, scale;
  const float *q, *kt, *vh, *mask, *fq, *fkt, *tq, *tk, *as, *nbs, *at, *nbt;
  float *out, *lse;
  // [B, Nkp / tile]: keys of the tile up to its last valid one, in whole vectors (0:
  // none), so that the loops skip a tile's trailing masked keys (padding)
  const int32_t* live;
};

// Squared scaled distances of query i to the tile of keys from j0: spatial into zs,
// temporal into zt.  Plain loops over the keys, which the compiler vectorises.
void tile_distances(const AttnArgs& A, int64_t b, int64_t i, int64_t j0, int64_t n,
                    float* __restrict zs, float* __restrict zt) {
  const AttnShapes& s = A.s;
  if (A.metric == kGreatCircle) {
    const float* a = A.fq + (b * s.nq + i) * 3;
    const float* x = A.fkt + (b * 3 + 0) * s.nkp + j0;
    const float* y = A.fkt + (b * 3 + 1) * s.nkp + j0;
    const float* z = A.fkt + (b * 3 + 2) * s.nkp + j0;
    const float a0 = a[0], a1 = a[1], a2 = a[2], sc = A.gc_scale2;
    for (int64_t j = 0; j < n; ++j) {
      const float d0 = a0 - x[j], d1 = a1 - y[j], d2 = a2 - z[j];
      const float s0 = a0 + x[j], s1 = a1 + y[j], s2v = a2 + z[j];
      const float c2 = d0 * d0 + d1 * d1 + d2 * d2;
      const float s2 = s0 * s0 + s1 * s1 + s2v * s2v;
      const bool near = c2 <= s2;
      const float u = 0.25f * (near ? c2 : s2);
      float p = kAsin[7];
      p = p * u + kAsin[6];
      p = p * u + kAsin[5];
      p = p * u + kAsin[4];
      p = p * u + kAsin[3];
      p = p * u + kAsin[2];
      p = p * u + kAsin[1];
      p = p * u + kAsin[0];
      const float g = 1.0f + u * p;
      const float far = 3.14159265358979f - 2.0f * std::sqrt(std::max(u, 1e-30f)) * g;
      zs[j] = sc * (near ? 4.0f * u * g * g : far * far);
    }
  } else if (A.metric == kEuclidean) {
    for (int64_t j = 0; j < n; ++j) zs[j] = 0.f;
    for (int64_t c = 0; c < s.cs; ++c) {
      const float a = A.fq[(b * s.nq + i) * s.cs + c];
      const float* x = A.fkt + (b * s.cs + c) * s.nkp + j0;
      for (int64_t j = 0; j < n; ++j) {
        const float d = a - x[j];
        zs[j] += d * d;
      }
    }
  }
  if (A.time) {
    const float ti = A.tq[b * s.nq + i];
    const float* t = A.tk + b * s.nkp + j0;
    for (int64_t j = 0; j < n; ++j) {
      const float d = ti - t[j];
      zt[j] = d * d;
    }
  }
}

// One block of queries [i0, i0 + rows) of batch element b, all heads.
template <int64_t DVL>  // value vectors per row (Dv / kLanes), 0: any Dv
void attention_block(const AttnArgs& A, int64_t b, int64_t i0, int64_t rows) {
  const AttnShapes& s = A.s;
  const int64_t H = s.heads, D = s.d, DV = s.dv;
  alignas(64) float zs[kRows][kTile], zt[kRows][kTile], sc[kRows][kTile];
  std::vector<float> o(H * kRows * DV, 0.f), m(H * kRows, kNegInf), l(H * kRows, 0.f);
  std::vector<float> qs(kRows * D);
  for (int64_t j0 = 0; j0 < s.nkp; j0 += s.tile) {
    const int64_t n = A.live[b * (s.nkp / s.tile) + j0 / s.tile];
    if (n == 0) continue;  // only masked keys
    for (int64_t r = 0; r < kRows; ++r) {
      tile_distances(A, b, i0 + std::min(r, rows - 1), j0, n, zs[r], zt[r]);
    }
    const float* mk = A.mask + b * s.nkp + j0;
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t r = 0; r < kRows; ++r) {
        const float* src = A.q + ((b * s.nq + i0 + std::min(r, rows - 1)) * H + h) * D;
        for (int64_t x = 0; x < D; ++x) qs[r * D + x] = src[x] * A.scale;
      }
      const float* kt = A.kt + (b * H + h) * D * s.nkp + j0;  // [D, Nkp] of this head
      const float* as = A.as + h * s.fs;
      const float* nbs = A.nbs + h * s.fs;
      const float* at = A.at + h * s.ft;
      const float* nbt = A.nbt + h * s.ft;
      vf mx[kRows];
      for (int64_t r = 0; r < kRows; ++r) mx[r] = splat(kNegInf);
      for (int64_t j = 0; j < n; j += kLanes) {
        vf acc[kRows] = {};
        for (int64_t x = 0; x < D; ++x) {
          const vf kv = load(kt + x * s.nkp + j);
          for (int64_t r = 0; r < kRows; ++r) acc[r] += qs[r * D + x] * kv;
        }
        const vf valid = load(mk + j);
        for (int64_t r = 0; r < kRows; ++r) {
          vf v = acc[r];
          if (A.metric != kNone) {
            const vf zz = load(zs[r] + j);
            for (int64_t f = 0; f < s.fs; ++f) v += as[f] * exp_nonpositive(zz * nbs[f]);
          }
          if (A.time) {
            const vf zz = load(zt[r] + j);
            for (int64_t f = 0; f < s.ft; ++f) v += at[f] * exp_nonpositive(zz * nbt[f]);
          }
          v = valid > 0.5f ? v : splat(kNegInf);
          store(sc[r] + j, v);
          mx[r] = mx[r] > v ? mx[r] : v;
        }
      }
      // online softmax: rescale the running sums to the new row maximum
      float corr[kRows], m_new[kRows];
      for (int64_t r = 0; r < kRows; ++r) {
        const int64_t idx = h * kRows + r;
        float tile_max = kNegInf;
        for (int64_t t = 0; t < kLanes; ++t) tile_max = std::max(tile_max, mx[r][t]);
        m_new[r] = std::max(m[idx], tile_max);
        corr[r] = (m[idx] == kNegInf || m_new[r] == kNegInf) ? 0.f : std::exp(m[idx] - m_new[r]);
        vf sum = vf{};
        if (m_new[r] != kNegInf) {
          for (int64_t j = 0; j < n; j += kLanes) {
            const vf p = exp_or_zero(load(sc[r] + j) - m_new[r]);
            store(sc[r] + j, p);
            sum += p;
          }
        } else {
          for (int64_t j = 0; j < n; ++j) sc[r][j] = 0.f;
        }
        l[idx] = l[idx] * corr[r] + static_cast<float>(hsum(sum));
        m[idx] = m_new[r];
      }
      const float* vh = A.vh + ((b * H + h) * s.nkp + j0) * DV;  // [tile, Dv] rows
      float* ob = o.data() + h * kRows * DV;
      if constexpr (DVL > 0) {
        // the rows' outputs stay in registers over the tile's keys
        vf acc[kRows][DVL];
        for (int64_t r = 0; r < kRows; ++r)
          for (int64_t x = 0; x < DVL; ++x) acc[r][x] = load(ob + r * DV + x * kLanes) * corr[r];
        for (int64_t j = 0; j < n; ++j) {
          vf vv[DVL];
          for (int64_t x = 0; x < DVL; ++x) vv[x] = load(vh + j * DV + x * kLanes);
          for (int64_t r = 0; r < kRows; ++r) {
            const float p = sc[r][j];
            for (int64_t x = 0; x < DVL; ++x) acc[r][x] += p * vv[x];
          }
        }
        for (int64_t r = 0; r < kRows; ++r)
          for (int64_t x = 0; x < DVL; ++x) store(ob + r * DV + x * kLanes, acc[r][x]);
      } else {
        for (int64_t r = 0; r < kRows; ++r) {
          float* orow = ob + r * DV;
          for (int64_t x = 0; x < DV; ++x) orow[x] *= corr[r];
          for (int64_t j = 0; j < n; ++j) {
            const float p = sc[r][j];
            const float* vrow = vh + j * DV;
            for (int64_t x = 0; x < DV; ++x) orow[x] += p * vrow[x];
          }
        }
      }
    }
  }
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = i0 + r, idx = h * kRows + r;
      float* dst = A.out + ((b * s.nq + i) * H + h) * DV;
      const bool ok = l[idx] > 0.f;
      for (int64_t x = 0; x < DV; ++x) dst[x] = ok ? o[idx * DV + x] / l[idx] : 0.f;
      A.lse[(b * H + h) * s.nq + i] =
          ok ? m[idx] + std::log(l[idx]) : std::numeric_limits<float>::infinity();
    }
  }
}

// Per-head copies of a [B, N, H, D] array, padded with zeros to Np points:
// transposed [B, H, D, Np] (vectors over points) or rows [B, H, Np, D].
std::vector<float> per_head(ffi::ThreadPool& pool, const float* src, int64_t B, int64_t N,
                            int64_t H, int64_t D, int64_t Np, bool transposed) {
  std::vector<float> dst(B * H * D * Np, 0.f);
  parallel_for(pool, B * H, [&](int64_t bh) {
    const int64_t b = bh / H, h = bh % H;
    for (int64_t j = 0; j < N; ++j) {
      const float* row = src + ((b * N + j) * H + h) * D;
      if (transposed) {
        for (int64_t x = 0; x < D; ++x) dst[(bh * D + x) * Np + j] = row[x];
      } else {
        std::memcpy(dst.data() + (bh * Np + j) * D, row, D * sizeof(float));
      }
    }
  });
  return dst;
}

// The key side's features, times and mask in padded layouts (features transposed
// [B, C, Nkp], times and mask [B, Nkp]), and which tiles hold a valid key.
struct KeyFeatures {
  std::vector<float> fkt, tk, mask;
  std::vector<int32_t> live;
};

KeyFeatures key_features(const AttnShapes& s, const float* fk, const float* tk,
                         const float* mask) {
  const int64_t B = s.batch, nkp = s.nkp;
  KeyFeatures kf{std::vector<float>(B * s.cs * nkp, 0.f), std::vector<float>(B * nkp, 0.f),
                 std::vector<float>(B * nkp, 0.f), std::vector<int32_t>(B * nkp / s.tile, 0)};
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j = 0; j < s.nk; ++j) {
      for (int64_t c = 0; c < s.cs; ++c) kf.fkt[(b * s.cs + c) * nkp + j] = fk[(b * s.nk + j) * s.cs + c];
      kf.tk[b * nkp + j] = tk[b * s.nk + j];
      kf.mask[b * nkp + j] = mask[b * s.nk + j];
      if (mask[b * s.nk + j] > 0.5f) {
        const int32_t through = static_cast<int32_t>(j % s.tile + kLanes) / kLanes * kLanes;
        kf.live[(b * nkp + j) / s.tile] = through;  // j increases: the last valid key wins
      }
    }
  }
  return kf;
}

// The operands both attention handlers take (q, k, v, mask, features, times, weights).
struct AttnOperands {
  ffi::Buffer<ffi::F32>&q, &k, &v, &mask, &fq, &fk, &tq, &tk, &as, &bs, &at, &bt;
};

// The shapes of an attention call into *out, checked; keys per tile at most max_tile.
ffi::Error attention_shapes(const char* name, const AttnOperands& o, int32_t metric,
                            int64_t max_tile, AttnShapes* out) {
  const auto qd = o.q.dimensions(), kd = o.k.dimensions(), vd = o.v.dimensions();
  const auto fd = o.fq.dimensions(), gd = o.fk.dimensions();
  const auto ad = o.as.dimensions(), td = o.at.dimensions();
  const auto bsd = o.bs.dimensions(), btd = o.bt.dimensions();
  if (qd.size() != 4 || kd.size() != 4 || vd.size() != 4 || fd.size() != 3 || gd.size() != 3 ||
      ad.size() != 2 || td.size() != 2 || bsd.size() != 2 || btd.size() != 2) {
    return ffi::Error::InvalidArgument(std::string(name) + ": unexpected ranks");
  }
  const int64_t tile = std::clamp((kd[1] + kLanes - 1) / kLanes * kLanes, kLanes, max_tile);
  const int64_t nkp = (kd[1] + tile - 1) / tile * tile;
  AttnShapes s{qd[0], qd[1], kd[1], qd[2], qd[3], vd[3], fd[2], ad[1], td[1], tile, nkp};
  const bool ok =
      kd[0] == s.batch && kd[2] == s.heads && kd[3] == s.d && vd[0] == s.batch &&
      vd[1] == s.nk && vd[2] == s.heads && fd[0] == s.batch && fd[1] == s.nq &&
      gd[0] == s.batch && gd[1] == s.nk && gd[2] == s.cs && ad[0] == s.heads &&
      td[0] == s.heads && bsd[0] == s.heads && bsd[1] == s.fs && btd[0] == s.heads &&
      btd[1] == s.ft && o.mask.element_count() == static_cast<size_t>(s.batch * s.nk) &&
      o.tq.element_count() == static_cast<size_t>(s.batch * s.nq) &&
      o.tk.element_count() == static_cast<size_t>(s.batch * s.nk) &&
      (metric != kGreatCircle || s.cs == 3) && s.fs <= kMaxBasis && s.ft <= kMaxBasis;
  if (!ok) {
    return ffi::Error::InvalidArgument(std::string(name) + ": inconsistent shapes");
  }
  *out = s;
  return ffi::Error::Success();
}

std::vector<float> negated(const float* x, int64_t n) {
  std::vector<float> out(n);
  for (int64_t i = 0; i < n; ++i) out[i] = -x[i];
  return out;
}

// What both attention handlers prepare from their operands: the keys transposed per
// head, the key side's features, times and mask, and the negated rates.
struct Prepared {
  std::vector<float> kt;
  KeyFeatures kf;
  std::vector<float> nbs, nbt;
};

Prepared prepare(ffi::ThreadPool& pool, const AttnShapes& s, const AttnOperands& o) {
  return {per_head(pool, o.k.typed_data(), s.batch, s.nk, s.heads, s.d, s.nkp,
                   /*transposed=*/true),
          key_features(s, o.fk.typed_data(), o.tk.typed_data(), o.mask.typed_data()),
          negated(o.bs.typed_data(), s.heads * s.fs), negated(o.bt.typed_data(), s.heads * s.ft)};
}

// The kernels' arguments; vh (rows of values), out and lse only for the forward.
AttnArgs attn_args(const AttnShapes& s, const AttnOperands& o, const Prepared& p,
                   int32_t metric, int32_t time, float gc_scale2, const float* vh, float* out,
                   float* lse) {
  return AttnArgs{s,
                  metric,
                  time != 0,
                  gc_scale2,
                  1.0f / std::sqrt(static_cast<float>(s.d)),
                  o.q.typed_data(),
                  p.kt.data(),
                  vh,
                  p.kf.mask.data(),
                  o.fq.typed_data(),
                  p.kf.fkt.data(),
                  o.tq.typed_data(),
                  p.kf.tk.data(),
                  o.as.typed_data(),
                  p.nbs.data(),
                  o.at.typed_data(),
                  p.nbt.data(),
                  out,
                  lse,
                  p.kf.live.data()};
}

ffi::Error rbf_attention(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> k,
                         ffi::Buffer<ffi::F32> v, ffi::Buffer<ffi::F32> mask,
                         ffi::Buffer<ffi::F32> fq, ffi::Buffer<ffi::F32> fk,
                         ffi::Buffer<ffi::F32> tq, ffi::Buffer<ffi::F32> tk,
                         ffi::Buffer<ffi::F32> as, ffi::Buffer<ffi::F32> bs,
                         ffi::Buffer<ffi::F32> at, ffi::Buffer<ffi::F32> bt,
                         ffi::ResultBuffer<ffi::F32> out, ffi::ResultBuffer<ffi::F32> lse,
                         int32_t metric, int32_t time, float gc_scale2) {
  try {
    AttnShapes s;
    const AttnOperands ops{q, k, v, mask, fq, fk, tq, tk, as, bs, at, bt};
    const ffi::Error bad = attention_shapes("xnp_rbf_attention", ops, metric, kTile, &s);
    if (bad.failure()) return bad;
    const int64_t B = s.batch;
    const Prepared prep = prepare(pool, s, ops);
    const std::vector<float> vh =
        per_head(pool, v.typed_data(), B, s.nk, s.heads, s.dv, s.nkp, /*transposed=*/false);
    const AttnArgs A = attn_args(s, ops, prep, metric, time, gc_scale2, vh.data(),
                                 out->typed_data(), lse->typed_data());
    auto run = [&](auto block) {
      const int64_t per_b = (s.nq + kRows - 1) / kRows;
      parallel_for(pool, B * per_b, [&](int64_t blk) {
        const int64_t b = blk / per_b, i0 = (blk % per_b) * kRows;
        block(A, b, i0, std::min(kRows, s.nq - i0));
      });
    };
    if (s.dv == kLanes) {
      run(attention_block<1>);
    } else if (s.dv == 2 * kLanes) {
      run(attention_block<2>);
    } else if (s.dv == 4 * kLanes) {
      run(attention_block<4>);
    } else {
      run(attention_block<0>);
    }
    return ffi::Error::Success();
  } catch (const std::bad_alloc&) {
    return out_of_memory("xnp_rbf_attention");
  } catch (const std::exception& err) {
    return internal_error("xnp_rbf_attention", err);
  }
}

// ---------------------------------------------------------------------------
// Fused biased attention, backward.  For the output cotangent dO, the forward's
// lse and delta_i = dO_i . O_i, every pair (i, j) of a head has
//     p_ij = exp(s_ij - lse_i),  dp_ij = dO_i . v_j,  ds_ij = p_ij (dp_ij - delta_i)
// and the cotangents are
//     dq_i = sum_j ds_ij k_j / sqrt(D),  dk_j = sum_i ds_ij q_i / sqrt(D),
//     dv_j = sum_i p_ij dO_i,
//     da_f = sum_ij ds_ij e_f,  db_f = -a_f sum_ij ds_ij e_f z_ij   (e_f = exp(-b_f z_ij)),
// scores, bias and p recomputed tile by tile (FlashAttention-2).  A unit of work is
// one batch element, one head and one chunk of keys: it owns its keys' dk and dv,
// and writes its share of dq to a buffer of its own; the shares and the weights'
// sums are added in a fixed order afterwards, so results do not depend on threads.

constexpr int64_t kTileBwd = 128;  // keys per tile at most
constexpr int64_t kUnits = 64;     // aim for at least this many units of work
constexpr int64_t kMaxShares = int64_t{1} << 26;  // floats of dq shares (256 MiB) at most

struct BwdArgs {
  AttnArgs A;  // geometry, features and weights (out and lse unused)
  const float *kh, *vt, *dout, *lse, *delta;  // keys [B,H,Nkp,D], values [B,H,Dv,Nkp]
  int64_t chunks, chunk;  // key chunks per (b, h), keys per chunk (whole tiles)
  float *dq_part;         // [chunks, B, H, Nq, D]
  float *dk, *dv;         // [B, Nk, H, D], [B, Nk, H, Dv]
  double* sums;           // per unit: sum ds e and sum ds e z, space basis then time basis
};

// Key side: acc[j][x] += sum_r w[r][j] * src[r][x] for the tile's keys j (dV from p
// and dO, dK from dS and q), the rows' vectors held in registers.  DL: vectors per
// row (D / kLanes), 0 for any D.  (accumulate_queries is the same shape of loop
// with the other side held: the two are kept apart for their register blocking.)
template <int64_t DL>
void accumulate_keys(const float (*w)[kTileBwd], int64_t tile, const float* src, int64_t D,
                     float* acc) {
  if constexpr (DL > 0) {
    vf s[kRows][DL];
    for (int64_t r = 0; r < kRows; ++r)
      for (int64_t x = 0; x < DL; ++x) s[r][x] = load(src + r * D + x * kLanes);
    for (int64_t j = 0; j < tile; ++j) {
      vf a[DL];
      for (int64_t x = 0; x < DL; ++x) a[x] = load(acc + j * D + x * kLanes);
      for (int64_t r = 0; r < kRows; ++r) {
        const float c = w[r][j];
        for (int64_t x = 0; x < DL; ++x) a[x] += c * s[r][x];
      }
      for (int64_t x = 0; x < DL; ++x) store(acc + j * D + x * kLanes, a[x]);
    }
  } else {
    for (int64_t j = 0; j < tile; ++j)
      for (int64_t r = 0; r < kRows; ++r)
        for (int64_t x = 0; x < D; ++x) acc[j * D + x] += w[r][j] * src[r * D + x];
  }
}

// Query side: dst[r][x] += sum_j w[r][j] * rows[j][x] over the tile's keys j (dQ from
// dS and k), the rows' sums held in registers.
template <int64_t DL>
void accumulate_queries(const float (*w)[kTileBwd], int64_t tile, const float* rows, int64_t D,
                        float* dst) {
  if constexpr (DL > 0) {
    vf a[kRows][DL];
    for (int64_t r = 0; r < kRows; ++r)
      for (int64_t x = 0; x < DL; ++x) a[r][x] = load(dst + r * D + x * kLanes);
    for (int64_t j = 0; j < tile; ++j) {
      vf kv[DL];
      for (int64_t x = 0; x < DL; ++x) kv[x] = load(rows + j * D + x * kLanes);
      for (int64_t r = 0; r < kRows; ++r) {
        const float c = w[r][j];
        for (int64_t x = 0; x < DL; ++x) a[r][x] += c * kv[x];
      }
    }
    for (int64_t r = 0; r < kRows; ++r)
      for (int64_t x = 0; x < DL; ++x) store(dst + r * D + x * kLanes, a[r][x]);
  } else {
    for (int64_t r = 0; r < kRows; ++r)
      for (int64_t j = 0; j < tile; ++j)
        for (int64_t x = 0; x < D; ++x) dst[r * D + x] += w[r][j] * rows[j * D + x];
  }
}

template <int64_t DL, int64_t DVL>
void backward_unit(const BwdArgs& G, int64_t unit) {
  const AttnArgs& A = G.A;
  const AttnShapes& s = A.s;
  // compile-time widths when the template fixes them (unrolled inner loops)
  const int64_t D = DL > 0 ? DL * kLanes : s.d, DV = DVL > 0 ? DVL * kLanes : s.dv;
  const int64_t H = s.heads, nkp = s.nkp, tile = s.tile;
  const int64_t b = unit / (H * G.chunks), h = (unit / G.chunks) % H, c = unit % G.chunks;
  const int64_t jbeg = c * G.chunk, jend = std::min(nkp, jbeg + G.chunk);
  const int64_t bh = b * H + h;
  std::vector<float> dk((jend - jbeg) * D, 0.f), dv((jend - jbeg) * DV, 0.f);
  std::vector<float> qs(kRows * D), dO(kRows * DV), dq(kRows * D);
  alignas(64) float zs[kRows][kTileBwd], zt[kRows][kTileBwd];
  alignas(64) float P[kRows][kTileBwd], dS[kRows][kTileBwd];
  const float* kt = A.kt + bh * D * nkp;  // [D, Nkp]
  const float* kh = G.kh + bh * nkp * D;  // [Nkp, D]
  const float* vt = G.vt + bh * DV * nkp;  // [Dv, Nkp]
  const float* as = A.as + h * s.fs;
  const float* nbs = A.nbs + h * s.fs;
  const float* at = A.at + h * s.ft;
  const float* nbt = A.nbt + h * s.ft;
  const int64_t F = s.fs + s.ft;
  double* sums = G.sums + unit * 2 * F;
  for (int64_t i0 = 0; i0 < s.nq; i0 += kRows) {
    const int64_t rows = std::min(kRows, s.nq - i0);
    float lse[kRows], delta[kRows];
    for (int64_t r = 0; r < kRows; ++r) {
      // rows past the end repeat the last one with lse = +inf: p = ds = 0
      const int64_t i = i0 + std::min(r, rows - 1);
      const float* src = A.q + ((b * s.nq + i) * H + h) * D;
      for (int64_t x = 0; x < D; ++x) qs[r * D + x] = src[x] * A.scale;
      std::memcpy(dO.data() + r * DV, G.dout + ((b * s.nq + i) * H + h) * DV, DV * sizeof(float));
      lse[r] = r < rows ? G.lse[bh * s.nq + i] : std::numeric_limits<float>::infinity();
      delta[r] = G.delta[bh * s.nq + i];
    }
    std::fill(dq.begin(), dq.end(), 0.f);
    vf ge[2 * kMaxBasis], gez[2 * kMaxBasis];
    for (int64_t f = 0; f < F; ++f) ge[f] = gez[f] = vf{};
    for (int64_t j0 = jbeg; j0 < jend; j0 += tile) {
      const int64_t n = A.live[b * (nkp / tile) + j0 / tile];
      if (n == 0) continue;  // only masked keys
      for (int64_t r = 0; r < kRows; ++r) {
        tile_distances(A, b, i0 + std::min(r, rows - 1), j0, n, zs[r], zt[r]);
      }
      const float* mk = A.mask + b * nkp + j0;
      for (int64_t j = 0; j < n; j += kLanes) {
        vf sacc[kRows] = {}, pacc[kRows] = {};
        for (int64_t x = 0; x < D; ++x) {
          const vf kv = load(kt + x * nkp + j0 + j);
          for (int64_t r = 0; r < kRows; ++r) sacc[r] += qs[r * D + x] * kv;
        }
        for (int64_t x = 0; x < DV; ++x) {
          const vf vv = load(vt + x * nkp + j0 + j);
          for (int64_t r = 0; r < kRows; ++r) pacc[r] += dO[r * DV + x] * vv;
        }
        const vf valid = load(mk + j);
        for (int64_t r = 0; r < kRows; ++r) {
          vf e[2 * kMaxBasis];
          vf sv = sacc[r];
          // distances (written only for the terms that exist)
          const vf z1 = A.metric != kNone ? load(zs[r] + j) : vf{};
          const vf z2 = A.time ? load(zt[r] + j) : vf{};
          if (A.metric != kNone) {
            for (int64_t f = 0; f < s.fs; ++f) {
              e[f] = exp_nonpositive(z1 * nbs[f]);
              sv += as[f] * e[f];
            }
          }
          if (A.time) {
            for (int64_t f = 0; f < s.ft; ++f) {
              e[s.fs + f] = exp_nonpositive(z2 * nbt[f]);
              sv += at[f] * e[s.fs + f];
            }
          }
          const vf p = valid > 0.5f ? exp_or_zero(sv - lse[r]) : vf{};
          const vf ds = p * (pacc[r] - delta[r]);
          store(P[r] + j, p);
          store(dS[r] + j, ds);
          if (A.metric != kNone) {
            for (int64_t f = 0; f < s.fs; ++f) {
              const vf t = ds * e[f];
              ge[f] += t;
              gez[f] += t * z1;
            }
          }
          if (A.time) {
            for (int64_t f = s.fs; f < F; ++f) {
              const vf t = ds * e[f];
              ge[f] += t;
              gez[f] += t * z2;
            }
          }
        }
      }
      accumulate_keys<DVL>(P, n, dO.data(), DV, dv.data() + (j0 - jbeg) * DV);
      accumulate_keys<DL>(dS, n, qs.data(), D, dk.data() + (j0 - jbeg) * D);
      accumulate_queries<DL>(dS, n, kh + j0 * D, D, dq.data());
    }
    for (int64_t f = 0; f < F; ++f) {
      sums[2 * f] += hsum(ge[f]);
      sums[2 * f + 1] += hsum(gez[f]);
    }
    float* part = G.dq_part + ((c * s.batch + b) * H + h) * s.nq * D;
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(part + (i0 + r) * D, dq.data() + r * D, D * sizeof(float));
    }
  }
  for (int64_t j = jbeg; j < std::min(jend, s.nk); ++j) {
    std::memcpy(G.dk + ((b * s.nk + j) * H + h) * D, dk.data() + (j - jbeg) * D,
                D * sizeof(float));
    std::memcpy(G.dv + ((b * s.nk + j) * H + h) * DV, dv.data() + (j - jbeg) * DV,
                DV * sizeof(float));
  }
}

ffi::Error rbf_attention_bwd(
    ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> k,
    ffi::Buffer<ffi::F32> v, ffi::Buffer<ffi::F32> mask, ffi::Buffer<ffi::F32> fq,
    ffi::Buffer<ffi::F32> fk, ffi::Buffer<ffi::F32> tq, ffi::Buffer<ffi::F32> tk,
    ffi::Buffer<ffi::F32> as, ffi::Buffer<ffi::F32> bs, ffi::Buffer<ffi::F32> at,
    ffi::Buffer<ffi::F32> bt, ffi::Buffer<ffi::F32> dout, ffi::Buffer<ffi::F32> lse,
    ffi::Buffer<ffi::F32> delta, ffi::ResultBuffer<ffi::F32> dq, ffi::ResultBuffer<ffi::F32> dk,
    ffi::ResultBuffer<ffi::F32> dv, ffi::ResultBuffer<ffi::F32> das,
    ffi::ResultBuffer<ffi::F32> dbs, ffi::ResultBuffer<ffi::F32> dat,
    ffi::ResultBuffer<ffi::F32> dbt, int32_t metric, int32_t time, float gc_scale2) {
  try {
    AttnShapes s;
    const AttnOperands ops{q, k, v, mask, fq, fk, tq, tk, as, bs, at, bt};
    const ffi::Error bad = attention_shapes("xnp_rbf_attention_bwd", ops, metric, kTileBwd, &s);
    if (bad.failure()) return bad;
    const auto od = dout.dimensions(), ld = lse.dimensions(), dd = delta.dimensions();
    const bool stats_ok = ld.size() == 3 && dd.size() == 3 && ld[0] == s.batch &&
                          ld[1] == s.heads && ld[2] == s.nq && dd[0] == s.batch &&
                          dd[1] == s.heads && dd[2] == s.nq;
    if (od.size() != 4 || od[0] != s.batch || od[1] != s.nq || od[2] != s.heads ||
        od[3] != s.dv || !stats_ok) {
      return ffi::Error::InvalidArgument(
          "xnp_rbf_attention_bwd: expected d_out [B, Nq, H, Dv], lse and delta [B, H, Nq]");
    }
    const int64_t B = s.batch, H = s.heads, D = s.d, F = s.fs + s.ft;
    const Prepared prep = prepare(pool, s, ops);
    const std::vector<float> kh =
        per_head(pool, k.typed_data(), B, s.nk, H, D, s.nkp, /*transposed=*/false);
    const std::vector<float> vt =
        per_head(pool, v.typed_data(), B, s.nk, H, s.dv, s.nkp, /*transposed=*/true);
    // chunks of keys per (b, h): enough units for the pool, and at most kMaxShares
    // floats of dq shares (a function of the shapes only, so the order of the sums is
    // too)
    const int64_t tiles = s.nkp / s.tile;
    const int64_t dq_size = std::max<int64_t>(B * H * s.nq * D, 1);
    const int64_t wanted = std::max<int64_t>(
        1, std::min({tiles, kUnits / std::max<int64_t>(B * H, 1), kMaxShares / dq_size}));
    const int64_t per_chunk = tiles == 0 ? 1 : (tiles + wanted - 1) / wanted;
    const int64_t chunks = (tiles + per_chunk - 1) / per_chunk;  // none empty; 0 if no keys
    const int64_t chunk = per_chunk * s.tile;
    const int64_t units = B * H * chunks;
    std::vector<float> dq_part(chunks * B * H * s.nq * D, 0.f);
    std::vector<double> sums(units * 2 * F, 0.0);
    const BwdArgs G{
        attn_args(s, ops, prep, metric, time, gc_scale2, nullptr, nullptr, nullptr),
        kh.data(), vt.data(), dout.typed_data(), lse.typed_data(), delta.typed_data(),
        chunks, chunk, dq_part.data(), dk->typed_data(), dv->typed_data(), sums.data()};
    // keys past the last valid one get zero cotangents from every unit; padded keys
    // beyond Nk are not written
    auto run = [&](auto unit) { parallel_for(pool, units, [&](int64_t u) { unit(G, u); }); };
    if (D == kLanes && s.dv == kLanes) {
      run(backward_unit<1, 1>);
    } else if (D == 2 * kLanes && s.dv == 2 * kLanes) {
      run(backward_unit<2, 2>);
    } else if (D == 4 * kLanes && s.dv == 4 * kLanes) {
      run(backward_unit<4, 4>);
    } else {
      run(backward_unit<0, 0>);
    }
    // dq: the chunks' shares in chunk order, scaled by 1/sqrt(D), into [B, Nq, H, D]
    const float scale = G.A.scale;
    float* dqp = dq->typed_data();
    parallel_for(pool, B * H, [&](int64_t bh) {
      const int64_t b = bh / H, h = bh % H;
      for (int64_t i = 0; i < s.nq; ++i) {
        float* dst = dqp + ((b * s.nq + i) * H + h) * D;
        for (int64_t x = 0; x < D; ++x) {
          float acc = 0.f;
          for (int64_t c = 0; c < chunks; ++c) acc += dq_part[((c * B * H + bh) * s.nq + i) * D + x];
          dst[x] = acc * scale;
        }
      }
    });
    // the weights' gradients: unit sums in unit order, per head
    auto weights = [&](int64_t f0, int64_t nf, const float* a, float* da, float* db) {
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t f = 0; f < nf; ++f) {
          double se = 0.0, sez = 0.0;
          for (int64_t b = 0; b < B; ++b) {
            for (int64_t c = 0; c < chunks; ++c) {
              const int64_t u = (b * H + h) * chunks + c;  // units in order
              se += sums[(u * F + f0 + f) * 2];
              sez += sums[(u * F + f0 + f) * 2 + 1];
            }
          }
          da[h * nf + f] = static_cast<float>(se);
          db[h * nf + f] = static_cast<float>(-a[h * nf + f] * sez);
        }
      }
    };
    weights(0, s.fs, as.typed_data(), das->typed_data(), dbs->typed_data());
    weights(s.fs, s.ft, at.typed_data(), dat->typed_data(), dbt->typed_data());
    return ffi::Error::Success();
  } catch (const std::bad_alloc&) {
    return out_of_memory("xnp_rbf_attention_bwd");
  } catch (const std::exception& err) {
    return internal_error("xnp_rbf_attention_bwd", err);
  }
}

}  // namespace

namespace {

// g, z, a, b in; da, db out (the handler with dz adds one more result)
auto rbf_grad_binding() {
  return ffi::Ffi::Bind()
      .Ctx<ffi::ThreadPool>()
      .Arg<ffi::Buffer<ffi::F32>>()
      .Arg<ffi::Buffer<ffi::F32>>()
      .Arg<ffi::Buffer<ffi::F32>>()
      .Arg<ffi::Buffer<ffi::F32>>()
      .Ret<ffi::Buffer<ffi::F32>>()
      .Ret<ffi::Buffer<ffi::F32>>();
}

// The operands both attention handlers start with
auto attention_binding() {
  return ffi::Ffi::Bind()
      .Ctx<ffi::ThreadPool>()
      .Arg<ffi::Buffer<ffi::F32>>()  // q
      .Arg<ffi::Buffer<ffi::F32>>()  // k
      .Arg<ffi::Buffer<ffi::F32>>()  // v
      .Arg<ffi::Buffer<ffi::F32>>()  // mask
      .Arg<ffi::Buffer<ffi::F32>>()  // spatial features, queries
      .Arg<ffi::Buffer<ffi::F32>>()  // spatial features, keys
      .Arg<ffi::Buffer<ffi::F32>>()  // times, queries
      .Arg<ffi::Buffer<ffi::F32>>()  // times, keys
      .Arg<ffi::Buffer<ffi::F32>>()  // a, space
      .Arg<ffi::Buffer<ffi::F32>>()  // b, space
      .Arg<ffi::Buffer<ffi::F32>>()  // a, time
      .Arg<ffi::Buffer<ffi::F32>>();  // b, time
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(XnpRbfGrad, rbf_grad_no_dz, rbf_grad_binding());

XLA_FFI_DEFINE_HANDLER_SYMBOL(XnpRbfGradDz, rbf_grad_dz,
                              rbf_grad_binding().Ret<ffi::Buffer<ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(XnpRbfBias, rbf_bias,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(XnpRbfAttention, rbf_attention,
                              attention_binding()
                                  .Ret<ffi::Buffer<ffi::F32>>()  // out
                                  .Ret<ffi::Buffer<ffi::F32>>()  // lse
                                  .Attr<int32_t>("metric")
                                  .Attr<int32_t>("time")
                                  .Attr<float>("gc_scale2"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(XnpRbfAttentionBwd, rbf_attention_bwd,
                              attention_binding()
                                  .Arg<ffi::Buffer<ffi::F32>>()  // d_out
                                  .Arg<ffi::Buffer<ffi::F32>>()  // lse
                                  .Arg<ffi::Buffer<ffi::F32>>()  // delta
                                  .Ret<ffi::Buffer<ffi::F32>>()  // dq
                                  .Ret<ffi::Buffer<ffi::F32>>()  // dk
                                  .Ret<ffi::Buffer<ffi::F32>>()  // dv
                                  .Ret<ffi::Buffer<ffi::F32>>()  // da, space
                                  .Ret<ffi::Buffer<ffi::F32>>()  // db, space
                                  .Ret<ffi::Buffer<ffi::F32>>()  // da, time
                                  .Ret<ffi::Buffer<ffi::F32>>()  // db, time
                                  .Attr<int32_t>("metric")
                                  .Attr<int32_t>("time")
                                  .Attr<float>("gc_scale2"));
