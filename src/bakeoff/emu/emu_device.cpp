// bakeoff's test accelerator "emu": a PrivateUse1 device for tests and demos only.
//
// Tensors live in host memory allocated by a counting allocator, but carry the PrivateUse1
// device type, so mixing them with CPU tensors raises PyTorch's usual device-mismatch errors.
// A handful of kernels (factories, copies, views, resize) are implemented here; every other
// op goes through one boxed fallback that runs PyTorch's native CPU kernels (the approach
// out-of-tree backends such as XLA use). Ops named "unsupported" by the test are counted in
// that fallback: the counter is exact ground truth for "work that did not run on the device".
//
// Only the headers it uses (not torch/extension.h, NativeFunctions.h): a third less to compile
// on the first use in every checkout.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/library.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/EmptyTensor.h>
#include <ATen/autocast_mode.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_local_scalar_dense.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>

namespace py = pybind11;

namespace {

std::mutex g_mutex;
std::set<std::string> g_unsupported;              // "aten::mul" (every overload) or "aten::mul.Tensor"
std::map<std::string, int64_t> g_fallback_counts;  // unsupported ops run through the host fallback
std::map<std::string, int64_t> g_op_counts;        // every op that reached the device
std::map<std::string, double> g_wrong;             // ops that return wrong results: output *= factor
std::map<std::string, int64_t> g_wrong_counts;     // calls whose outputs were made wrong
std::unordered_map<void*, size_t> g_sizes;
int64_t g_allocated = 0;
int64_t g_peak = 0;
int64_t g_h2d_count = 0, g_h2d_bytes = 0, g_d2h_count = 0, g_d2h_bytes = 0, g_syncs = 0;
thread_local int t_in_fallback = 0;  // copies made by the fallback itself are not transfers

c10::Device emu_device() { return c10::Device(c10::DeviceType::PrivateUse1, 0); }

void emu_free(void* ptr) {
  if (!ptr) return;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto found = g_sizes.find(ptr);
    if (found != g_sizes.end()) {
      g_allocated -= static_cast<int64_t>(found->second);
      g_sizes.erase(found);
    }
  }
  c10::free_cpu(ptr);
}

struct EmuAllocator final : at::Allocator {
  at::DataPtr allocate(size_t nbytes) override {
    void* data = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    if (data) {
      std::lock_guard<std::mutex> lock(g_mutex);
      g_sizes[data] = nbytes;
      g_allocated += static_cast<int64_t>(nbytes);
      if (g_allocated > g_peak) g_peak = g_allocated;
    }
    return {data, data, &emu_free, emu_device()};
  }
  at::DeleterFnPtr raw_deleter() const override { return &emu_free; }
  void copy_data(void* dest, const void* src, std::size_t count) const final {
    default_copy_data(dest, src, count);
  }
};

EmuAllocator g_allocator;

struct EmuGuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return c10::DeviceType::PrivateUse1; }
  c10::Device exchangeDevice(c10::Device) const override { return emu_device(); }
  c10::Device getDevice() const override { return emu_device(); }
  void setDevice(c10::Device device) const override {
    TORCH_CHECK(device.index() <= 0, "emu has a single device (emu:0), got ", device);
  }
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, emu_device());
  }
  c10::Stream exchangeStream(c10::Stream) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, emu_device());
  }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  void synchronizeDevice(const c10::DeviceIndex) const override {}
};

struct EmuHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return 1; }
  c10::DeviceIndex getCurrentDevice() const override { return 0; }
  void setCurrentDevice(c10::DeviceIndex) const override {}
  const at::Generator& getDefaultGenerator(c10::DeviceIndex) const override {
    static at::Generator generator = at::make_generator<at::CPUGeneratorImpl>();
    return generator;
  }
  at::Device getDeviceFromPtr(void*) const override { return emu_device(); }
  bool isPinnedPtr(const void*) const override { return false; }
  at::Allocator* getPinnedMemoryAllocator() const override { return c10::GetCPUAllocator(); }
  // Host memory: a storage grows or shrinks as a CPU one does, through its own (emu) allocator,
  // so the device's accounting sees it (FSDP2 frees its unsharded parameters this way).
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    at::native::resize_bytes_cpu(storage.unsafeGetStorageImpl(), newsize);
  }
};

// A CPU tensor sharing the storage of an emu tensor (emu memory is host memory).
at::Tensor host_alias(const at::Tensor& src) {
  if (!src.defined() || src.device().type() != c10::DeviceType::PrivateUse1) return src;
  at::DataPtr data_ptr = c10::InefficientStdFunctionContext::makeDataPtr(
      src.storage().mutable_data_ptr().get(), [](void*) {}, at::kCPU);
  c10::Storage storage{c10::Storage::use_byte_size_t{}, src.storage().nbytes(), std::move(data_ptr),
                       /*allocator=*/nullptr, /*resizable=*/false};
  at::Tensor tensor = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::CPU), src.dtype());
  tensor.unsafeGetTensorImpl()->set_sizes_and_strides(src.sizes(), src.strides(), src.storage_offset());
  return tensor;
}

constexpr c10::DispatchKeySet kEmuKeys(c10::DispatchKey::PrivateUse1);

at::Tensor emu_empty(c10::IntArrayRef size, std::optional<at::ScalarType> dtype, std::optional<at::Layout>,
                     std::optional<at::Device>, std::optional<bool>, std::optional<at::MemoryFormat> memory_format) {
  return at::detail::empty_generic(size, &g_allocator, kEmuKeys, c10::dtype_or_default(dtype), memory_format);
}

at::Tensor emu_empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                             std::optional<at::Layout>, std::optional<at::Device>, std::optional<bool>) {
  return at::detail::empty_strided_generic(size, stride, &g_allocator, kEmuKeys, c10::dtype_or_default(dtype));
}

void count_transfer(const at::Tensor& src, const at::Tensor& dst) {
  if (t_in_fallback) return;
  bool from_emu = src.device().type() == c10::DeviceType::PrivateUse1;
  bool to_emu = dst.device().type() == c10::DeviceType::PrivateUse1;
  if (from_emu == to_emu) return;
  int64_t bytes = static_cast<int64_t>(dst.numel() * dst.element_size());
  std::lock_guard<std::mutex> lock(g_mutex);
  if (to_emu) { g_h2d_count++; g_h2d_bytes += bytes; } else { g_d2h_count++; g_d2h_bytes += bytes; }
}

at::Tensor emu_copy_from(const at::Tensor& self, const at::Tensor& dst, bool) {
  TORCH_CHECK(self.is_cpu() || self.device().type() == c10::DeviceType::PrivateUse1,
              "emu copies only to and from cpu, got ", self.device());
  TORCH_CHECK(dst.is_cpu() || dst.device().type() == c10::DeviceType::PrivateUse1,
              "emu copies only to and from cpu, got ", dst.device());
  count_transfer(self, dst);
  host_alias(dst).copy_(host_alias(self));
  return dst;
}

const at::Tensor& emu_resize(const at::Tensor& self, c10::IntArrayRef size,
                             std::optional<at::MemoryFormat> memory_format) {
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_sizes_contiguous(size);
  const auto nbytes = at::detail::computeStorageNbytesContiguous(size, impl->dtype().itemsize(), impl->storage_offset());
  at::native::maybe_resize_storage_cpu(impl, nbytes);
  if (memory_format.has_value()) {
    TORCH_CHECK(*memory_format != at::MemoryFormat::Preserve, "unsupported memory format ", *memory_format);
    impl->empty_tensor_restride(*memory_format);
  }
  return self;
}

at::Tensor emu_copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  emu_resize(dst, self.sizes(), std::nullopt);
  return emu_copy_from(self, dst, false);
}

at::Tensor& emu_set_storage(at::Tensor& result, c10::Storage storage, int64_t offset, c10::IntArrayRef size,
                            c10::IntArrayRef stride) {
  result.unsafeGetTensorImpl()->set_storage_keep_dtype(std::move(storage));
  result.unsafeGetTensorImpl()->set_storage_offset(offset);
  at::OptionalIntArrayRef stride_opt = stride.data() != nullptr ? at::OptionalIntArrayRef(stride) : std::nullopt;
  at::native::resize_impl_cpu_(result.unsafeGetTensorImpl(), size, stride_opt, /*resize_storage=*/true);
  return result;
}

at::Tensor& emu_set_source_storage(at::Tensor& result, c10::Storage storage) {
  int64_t numel = static_cast<int64_t>(storage.nbytes() / result.dtype().itemsize());
  return emu_set_storage(result, std::move(storage), 0, {numel}, {});
}

at::Tensor& emu_set_source_tensor(at::Tensor& result, const at::Tensor& source) {
  return emu_set_storage(result, source.storage(), source.storage_offset(), source.sizes(), source.strides());
}

at::Scalar emu_local_scalar_dense(const at::Tensor& self) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_syncs++;
  }
  return at::_local_scalar_dense(host_alias(self));
}

// Whether `self.data = from` may swap `from`'s storage into `self` in place. PyTorch's own answer
// (TensorImpl::has_compatible_shallow_copy_type) counts only its in-tree backends as dense, so a
// CPU tensor and a PrivateUse1 one were "incompatible": Module._apply then made a new Parameter
// per module instead of assigning `param.data`, and `.to("emu")` untied tied weights (an embedding
// and its output head became two parameters) where `.to("cuda")` keeps them tied. emu is a dense
// backend like CUDA: the same rule, with PrivateUse1 among the dense backends.
bool emu_has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto is_dense = [](c10::DispatchKeySet keys) {
    using c10::BackendComponent;
    constexpr auto dense_backends = c10::DispatchKeySet(
        {BackendComponent::CPUBit, BackendComponent::CUDABit, BackendComponent::MPSBit, BackendComponent::HIPBit,
         BackendComponent::XPUBit, BackendComponent::HPUBit, BackendComponent::MTIABit,
         BackendComponent::PrivateUse1Bit});
    return keys.has_any(c10::DispatchKeySet(c10::DispatchKey::Dense)) && keys.has_any(dense_backends);
  };
  return (is_dense(self.key_set()) && is_dense(from.key_set())) ||
         self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set());
}

void emu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& name = op.schema().operator_name();
  std::string full = name.name + (name.overload_name.empty() ? "" : "." + name.overload_name);
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_op_counts[full]++;
    if (g_unsupported.count(full) || g_unsupported.count(name.name)) g_fallback_counts[full]++;
  }
  double factor = 0.0;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto found = g_wrong.find(full);
    if (found == g_wrong.end()) found = g_wrong.find(name.name);
    if (found != g_wrong.end()) {
      factor = found->second;
      g_wrong_counts[full]++;
    }
  }
  t_in_fallback++;
  try {
    at::native::cpu_fallback(op, stack);
    if (factor != 0.0) {  // a seeded fault: every floating output scaled, on the host, in place
      const size_t returns = op.schema().returns().size();
      for (size_t i = stack->size() - returns; i < stack->size(); ++i) {
        const auto& value = (*stack)[i];
        if (value.isTensor() && value.toTensor().is_floating_point()) host_alias(value.toTensor()).mul_(factor);
      }
    }
  } catch (...) {
    t_in_fallback--;
    throw;
  }
  t_in_fallback--;
}

}  // namespace

C10_REGISTER_GUARD_IMPL(PrivateUse1, EmuGuardImpl);
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", &emu_empty);
  m.impl("empty_strided", &emu_empty_strided);
  m.impl("_copy_from", &emu_copy_from);
  m.impl("_copy_from_and_resize", &emu_copy_from_and_resize);
  m.impl("resize_", &emu_resize);
  m.impl("set_.source_Storage", &emu_set_source_storage);
  m.impl("set_.source_Storage_storage_offset", &emu_set_storage);
  m.impl("set_.source_Tensor", &emu_set_source_tensor);
  m.impl("_local_scalar_dense", &emu_local_scalar_dense);
  m.impl("as_strided", at::native::as_strided_tensorimpl);
  m.impl("view", at::native::view);
  m.impl("_reshape_alias", at::native::_reshape_alias);
  m.impl("unfold", at::native::unfold);
  m.impl("alias", at::native::alias);
  m.impl("_has_compatible_shallow_copy_type", &emu_has_compatible_shallow_copy_type);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&emu_fallback>());
}

// Autocast (torch.autocast("emu", dtype=torch.bfloat16)): an out-of-tree device registers its own
// op lists. emu takes PyTorch's shared lists, the ones CUDA and XPU use (matmuls and convolutions
// in the lower precision, reductions, norms and losses in float32), so an amp target on emu casts
// like a GPU would, not like the CPU. Every op not listed falls through to the device kernel.
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  using at::IntArrayRef;  // the shared lists spell their signatures inside namespace at
  using at::Scalar;
  using at::ScalarType;
  using at::Tensor;
#define EMU_LOWER(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
  AT_FORALL_LOWER_PRECISION_FP(EMU_LOWER)
#undef EMU_LOWER
#define EMU_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
  AT_FORALL_FP32(EMU_FP32)
#undef EMU_FP32
#define EMU_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
  AT_FORALL_FP32_SET_OPT_DTYPE(EMU_FP32_SET_OPT_DTYPE)
#undef EMU_FP32_SET_OPT_DTYPE
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
#define EMU_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_PROMOTE(EMU_PROMOTE)
#undef EMU_PROMOTE
}

namespace {

void register_hooks() {
  static EmuHooks hooks;
  static bool done = false;
  if (!done) {
    at::RegisterPrivateUse1HooksInterface(&hooks);
    done = true;
  }
}

void set_unsupported(const std::vector<std::string>& names) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_unsupported.clear();
  for (const auto& n : names) g_unsupported.insert(n.find("::") == std::string::npos ? "aten::" + n : n);
}

void set_wrong(const std::map<std::string, double>& ops) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_wrong.clear();
  for (const auto& kv : ops) g_wrong[kv.first.find("::") == std::string::npos ? "aten::" + kv.first : kv.first] = kv.second;
}

py::dict counters() {
  std::lock_guard<std::mutex> lock(g_mutex);
  py::dict out;
  py::dict fallback, ops;
  for (const auto& kv : g_fallback_counts) fallback[py::str(kv.first)] = kv.second;
  for (const auto& kv : g_op_counts) ops[py::str(kv.first)] = kv.second;
  py::dict wrong;
  for (const auto& kv : g_wrong_counts) wrong[py::str(kv.first)] = kv.second;
  out["wrong_ops"] = wrong;
  out["fallback_ops"] = fallback;
  out["device_ops"] = ops;
  out["h2d_count"] = g_h2d_count;
  out["h2d_bytes"] = g_h2d_bytes;
  out["d2h_count"] = g_d2h_count;
  out["d2h_bytes"] = g_d2h_bytes;
  out["syncs"] = g_syncs;
  return out;
}

void reset_counters() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_fallback_counts.clear();
  g_op_counts.clear();
  g_wrong_counts.clear();
  g_h2d_count = g_h2d_bytes = g_d2h_count = g_d2h_bytes = g_syncs = 0;
}

int64_t memory_allocated() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_allocated;
}

int64_t max_memory_allocated() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_peak;
}

void reset_peak_memory_stats() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_peak = g_allocated;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("register_hooks", &register_hooks);
  m.def("set_unsupported", &set_unsupported);
  m.def("set_wrong", &set_wrong);
  m.def("counters", &counters);
  m.def("reset_counters", &reset_counters);
  m.def("memory_allocated", &memory_allocated);
  m.def("max_memory_allocated", &max_memory_allocated);
  m.def("reset_peak_memory_stats", &reset_peak_memory_stats);
}
