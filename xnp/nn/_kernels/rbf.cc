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
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr int64_t kLanes = 16;
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
// has no free thread.
template <typename Task>
void parallel_for(ffi::ThreadPool& pool, int64_t n, const Task& task) {
  struct State {
    std::atomic<int64_t> next{0}, done{0};
    std::mutex mutex;
    std::condition_variable cv;
  };
  auto state = std::make_shared<State>();
  const Task* body = &task;
  // Workers touch `body` only while a task is left, i.e. before this returns.
  auto work = [state, body, n]() {
    for (int64_t i; (i = state->next.fetch_add(1)) < n;) {
      (*body)(i);
      if (state->done.fetch_add(1) + 1 == n) {
        std::lock_guard<std::mutex> lock(state->mutex);
        state->cv.notify_all();
      }
    }
  };
  const int64_t helpers = std::min<int64_t>(pool.num_threads(), n - 1);
  for (int64_t t = 0; t < helpers; ++t) pool.Schedule(decltype(work)(work));
  work();
  std::unique_lock<std::mutex> lock(state->mutex);
  state->cv.wait(lock, [&] { return state->done.load() == n; });
}

ffi::Error rbf_grad(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> g, ffi::Buffer<ffi::F32> z,
                    ffi::Buffer<ffi::F32> a, ffi::Buffer<ffi::F32> b,
                    ffi::ResultBuffer<ffi::F32> da, ffi::ResultBuffer<ffi::F32> db, float* dz) {
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
  // blocks of about 16 KiB of z each, at most 64: enough to balance two to a few
  // dozen threads, few enough that the per-block sums cost nothing
  const int64_t per_block =
      std::max<int64_t>({1, 4096 / std::max<int64_t>(s.keys, 1), (rows + 63) / 64});
  const int64_t blocks = rows == 0 ? 0 : (rows + per_block - 1) / per_block;
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
}

// The bias itself, out[b,h,q,k] = sum_f a[h,f] * exp(-b[h,f] * z[b,q,k]).
ffi::Error rbf_bias(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> z, ffi::Buffer<ffi::F32> a,
                    ffi::Buffer<ffi::F32> b, ffi::ResultBuffer<ffi::F32> out) {
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
  const int64_t per_block =
      std::max<int64_t>({1, 4096 / std::max<int64_t>(K, 1), (rows + 63) / 64});
  const int64_t blocks = rows == 0 ? 0 : (rows + per_block - 1) / per_block;
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

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(XnpRbfGrad, rbf_grad_no_dz,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(XnpRbfGradDz, rbf_grad_dz,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(XnpRbfBias, rbf_bias,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>());
