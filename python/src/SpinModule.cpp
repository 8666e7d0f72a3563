//===- SpinModule.cpp - the spin Python extension -------------------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
// Thin bindings: the state pool and step programs of the runtime (CPU and
// CUDA), and (with the compiler) JIT compilation through the project's
// pipelines. Argument checking with Python-level messages lives in
// spin/__init__.py; everything the runtime checks comes back as ValueError
// with the runtime's message (RuntimeError for driver and device failures).
// The CUDA part passes device pointers and streams as integers and never
// links libcuda: the runtime opens it on first use, so `import spin` works
// on machines without a GPU.
//
//===----------------------------------------------------------------------===//

#include "AbiModule.h"

#include "spin/Runtime/GpuProgram.h"
#include "spin/Runtime/GpuStatePool.h"
#include "spin/Runtime/StatePool.h"
#include "spin/Runtime/StepProgram.h"

#ifdef SPIN_HAS_COMPILER
#include "spin/ExecutionEngine/CpuExecutable.h"
#include "spin/ExecutionEngine/GpuCompiler.h"
#endif

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <type_traits>

namespace py = pybind11;
namespace rt = ::spin::runtime;

namespace {

[[noreturn]] void raise(const std::string &message) {
  throw py::value_error(message);
}

/// The value, or the status raised as `Error` (ValueError by default; a
/// RuntimeError for failures of the driver or device).
template <typename Error = py::value_error, typename T>
T unwrap(rt::StatusOr<T> value) {
  if (!value.ok())
    throw Error(value.message());
  return std::move(*value);
}

void check(const rt::Status &status) {
  if (!status.ok())
    raise(status.message());
}

rt::DType dtypeFromName(const std::string &name) {
  std::optional<rt::DType> dtype = rt::dtypeFromName(name);
  if (!dtype)
    raise("unknown element type '" + name + "'");
  return *dtype;
}

rt::cuda::CUstream streamFrom(uintptr_t stream) {
  return reinterpret_cast<rt::cuda::CUstream>(stream);
}

/// {name: (device pointer, shape, dtype name)} -> device tensors.
std::map<std::string, rt::DeviceTensorRef>
deviceTensors(const py::dict &arrays) {
  std::map<std::string, rt::DeviceTensorRef> out;
  for (auto item : arrays) {
    auto name = item.first.cast<std::string>();
    auto triple = item.second.cast<py::tuple>();
    if (triple.size() != 3)
      raise("'" + name + "' must be (data pointer, shape, dtype)");
    rt::DeviceTensorRef ref;
    ref.data = triple[0].cast<uint64_t>();
    ref.shape = triple[1].cast<std::vector<int64_t>>();
    ref.dtype = dtypeFromName(triple[2].cast<std::string>());
    out[name] = ref;
  }
  return out;
}

/// A step argument as the manifest's members name it.
py::dict argumentDict(const rt::ArgSpec &arg) {
  namespace k = rt::manifest::key;
  py::dict d;
  d[k::Role] = rt::argRoleName(arg.role);
  d[k::Name] = arg.name;
  d[k::Layer] = arg.layer;
  d[k::Dtype] = rt::dtypeName(arg.dtype);
  d[k::Shape] = arg.shape;
  return d;
}

/// The parts of a manifest that Python uses, as plain data under the
/// manifest's member names (plus the artifact's directory; kernels by name).
py::dict manifestDict(const rt::GpuManifest &m) {
  namespace k = rt::manifest::key;
  py::dict d;
  d["directory"] = m.directory;
  d[k::Function] = m.function;
  d[k::CompilerVersion] = m.compilerVersion;
  py::dict options, ptx;
  for (const auto &[key, value] : m.options)
    options[py::str(key)] = value;
  for (const auto &[chip, file] : m.ptx)
    ptx[py::str(chip)] = file;
  d[k::Options] = options;
  d[k::Ptx] = ptx;
  d[k::Batch] = m.batch;
  d[k::Rows] = m.rows;
  if (m.state) {
    py::dict state;
    state[k::Layers] = m.state->layers;
    state[k::Capacity] = m.state->capacity;
    state[k::BlockSize] = m.state->blockSize;
    state[k::MaxRows] = m.state->maxRows;
    if (m.state->pageSize > 0)
      state[k::PageSize] = m.state->pageSize;
    d[k::State] = state;
  } else {
    d[k::State] = py::none();
  }
  py::list arguments, kernels;
  for (const rt::ArgSpec &arg : m.arguments)
    arguments.append(argumentDict(arg));
  for (const rt::GpuKernelSpec &kernel : m.kernels)
    kernels.append(kernel.name);
  d[k::Arguments] = arguments;
  d[k::Kernels] = kernels;
  return d;
}

/// {name: (buffer, dtype name)} -> tensors viewing the buffers (no copy).
/// `keep` holds the buffer views alive for the call.
std::map<std::string, rt::TensorRef>
tensors(const py::dict &arrays, std::vector<py::buffer_info> &keep,
        bool writable) {
  std::map<std::string, rt::TensorRef> out;
  for (auto item : arrays) {
    auto name = item.first.cast<std::string>();
    auto pair = item.second.cast<py::tuple>();
    auto buffer = pair[0].cast<py::buffer>();
    keep.push_back(buffer.request(writable));
    const py::buffer_info &info = keep.back();
    int64_t expected = info.itemsize;
    for (py::ssize_t d = info.ndim; d-- > 0;) {
      if (info.shape[d] > 1 && info.strides[d] != expected)
        raise("'" + name + "' is not C-contiguous");
      expected *= info.shape[d];
    }
    rt::TensorRef ref;
    ref.data = info.ptr;
    ref.shape.assign(info.shape.begin(), info.shape.end());
    ref.dtype = dtypeFromName(pair[1].cast<std::string>());
    if (info.itemsize != rt::dtypeSize(ref.dtype))
      raise("'" + name + "' has " + std::to_string(info.itemsize) +
            "-byte elements, " + rt::dtypeName(ref.dtype) + " needs " +
            std::to_string(rt::dtypeSize(ref.dtype)));
    out[name] = ref;
  }
  return out;
}

py::list signatureOf(const std::vector<rt::ArgSpec> &signature) {
  py::list list;
  for (const rt::ArgSpec &arg : signature)
    list.append(argumentDict(arg));
  return list;
}

/// `call()` with the GIL released: for native work that touches no Python
/// object (steps, compilation, and calls that take the state pool's locks
/// or enter the CUDA driver). Such calls may wait for other threads (a
/// step in flight, the driver's own locks, a tool such as
/// compute-sanitizer that serialises API calls); waiting there with the
/// GIL held would stop every Python thread, including the ones waited
/// for, and long work would stop them too.
template <typename Call>
static auto withoutGil(Call &&call) -> decltype(call()) {
  py::gil_scoped_release release;
  return call();
}

/// A step program and whatever keeps its code alive.
struct Program {
  std::shared_ptr<void> owner;
  const rt::StepProgram *program = nullptr;
  std::string graphIR;
  bool fromDiskCache = false;

  void run(rt::StatePool &pool, const py::dict &inputs, const py::dict &outputs) {
    std::vector<py::buffer_info> keep;
    auto in = tensors(inputs, keep, /*writable=*/false);
    auto out = tensors(outputs, keep, /*writable=*/true);
    check(withoutGil([&] { return program->run(pool, in, out); }));
  }
};

} // namespace

//===----------------------------------------------------------------------===//
// CPU
//===----------------------------------------------------------------------===//

/// The host state pool that CPU step programs run on. `state` and
/// `last_observed` return copies, so that tests can keep them across steps.
static void bindStatePool(py::module_ &m) {
  py::class_<rt::StatePool>(m, "StatePool")
      .def(py::init([](int64_t layers, int64_t slots, int64_t capacity,
                       int64_t rows, int64_t blockSize, bool lastObserved) {
             rt::StatePoolOptions options;
             options.numLayers = layers;
             options.numSlots = slots;
             options.capacity = capacity;
             options.maxRows = rows;
             options.blockSize = blockSize;
             options.lastObserved = lastObserved;
             return unwrap(rt::StatePool::create(options));
           }),
           py::arg("layers"), py::arg("slots"), py::arg("capacity"),
           py::arg("rows"), py::arg("block_size"),
           py::arg("last_observed") = false)
      .def("acquire", [](rt::StatePool &p, int64_t id) { return unwrap(p.acquire(id)); })
      .def("release", [](rt::StatePool &p, int64_t id) { check(p.release(id)); })
      .def("reset", [](rt::StatePool &p, int64_t id) { check(p.reset(id)); })
      .def("commit", [](rt::StatePool &p, int64_t id, int32_t accepted) {
        check(p.commit(id, accepted));
      })
      .def("contains", &rt::StatePool::contains)
      .def("has_pending_rows", &rt::StatePool::hasPendingRows)
      .def("live_requests", &rt::StatePool::liveRequests)
      .def("iteration", [](rt::StatePool &p, int64_t id, int64_t layer) {
        return unwrap(p.iteration(id, layer));
      })
      .def("state", [](rt::StatePool &p, int64_t id, int64_t layer) {
        const float *v = unwrap(p.v(id, layer));
        const float *d = unwrap(p.d(id, layer));
        int64_t c = p.options().capacity;
        return py::make_tuple(std::vector<float>(v, v + c),
                              std::vector<float>(d, d + c));
      }, "Copies of (V, D) of one request and layer")
      .def("last_observed", [](rt::StatePool &p, int64_t id, int64_t layer) {
        const int32_t *last = unwrap(p.lastObserved(id, layer));
        return std::vector<int32_t>(last, last + p.numBlocks());
      }, "Copy of the per-block last-observed iterations of one request and "
         "layer (it + 1 at the block's last scoring, 0 = never)");
}

/// A compiled CPU step program (`compile` returns one). `run` releases the
/// GIL, so that other Python threads go on while a step runs.
static void bindProgram(py::module_ &m) {
  py::class_<Program>(m, "Program")
      .def("run", &Program::run, py::arg("pool"), py::arg("inputs"),
           py::arg("outputs"))
      .def_property_readonly("signature", [](const Program &p) {
        return signatureOf(p.program->signature());
      })
      .def_property_readonly("graph_ir", [](const Program &p) { return p.graphIR; })
      .def_property_readonly("from_disk_cache",
                             [](const Program &p) { return p.fromDiskCache; });
}

//===----------------------------------------------------------------------===//
// CUDA
//===----------------------------------------------------------------------===//

/// Reading a manifest needs no GPU, so that artifacts can be inspected and
/// validated on any machine.
static void bindManifest(py::module_ &m) {
  m.def(
      "read_manifest",
      [](const std::string &dir) {
        return manifestDict(unwrap(rt::GpuManifest::read(dir)));
      },
      py::arg("directory"),
      "Reads and validates DIR/manifest.json of a GPU artifact (no GPU "
      "needed); ValueError names the file and the field");
}

/// The device state pool of GPU programs. Streams are passed as integers,
/// so that the module never links libcuda; every call that takes the
/// pool's locks or enters the driver releases the GIL (withoutGil).
static void bindGpuStatePool(py::module_ &m) {
  py::class_<rt::GpuStatePool>(m, "GpuStatePool")
      .def(py::init([](int64_t layers, int64_t slots, int64_t capacity,
                       int64_t rows, int64_t blockSize, uintptr_t stream,
                       int device) {
             rt::StatePoolOptions options;
             options.numLayers = layers;
             options.numSlots = slots;
             options.capacity = capacity;
             options.maxRows = rows;
             options.blockSize = blockSize;
             // Bad options are input errors; the rest is the device's.
             unwrap(rt::StatePool::layoutOf(options));
             return unwrap<std::runtime_error>(
                 rt::GpuStatePool::create(options, streamFrom(stream), device));
           }),
           py::arg("layers"), py::arg("slots"), py::arg("capacity"),
           py::arg("rows"), py::arg("block_size"), py::arg("stream"),
           py::arg("device"))
      .def("acquire",
           [](rt::GpuStatePool &p, int64_t id, uintptr_t stream) {
             return unwrap(withoutGil([&] {
               return p.acquire(id, streamFrom(stream));
             }));
           })
      .def("release",
           [](rt::GpuStatePool &p, int64_t id) {
             check(withoutGil([&] { return p.release(id); }));
           })
      .def("reset",
           [](rt::GpuStatePool &p, int64_t id, uintptr_t stream) {
             check(withoutGil([&] { return p.reset(id, streamFrom(stream)); }));
           })
      .def("commit",
           [](rt::GpuStatePool &p, int64_t id, int32_t accepted) {
             check(withoutGil([&] { return p.commit(id, accepted); }));
           })
      .def("contains", &rt::GpuStatePool::contains)
      .def("has_pending_rows", &rt::GpuStatePool::hasPendingRows)
      .def("live_requests", &rt::GpuStatePool::liveRequests)
      .def("slot_of",
           [](rt::GpuStatePool &p, int64_t id) { return unwrap(p.slotOf(id)); })
      .def(
          "iteration",
          [](rt::GpuStatePool &p, int64_t id, int64_t layer, uintptr_t stream) {
            return unwrap(withoutGil([&] {
              return p.iteration(id, layer, streamFrom(stream));
            }));
          })
      .def(
          "state",
          [](rt::GpuStatePool &p, int64_t id, int64_t layer, uintptr_t stream) {
            // D is read only when V was.
            auto [v, d] = withoutGil([&] {
              rt::StatusOr<std::vector<float>> vertical =
                  p.v(id, layer, streamFrom(stream));
              rt::StatusOr<std::vector<float>> diagonal =
                  vertical.ok() ? p.d(id, layer, streamFrom(stream))
                                : vertical.status();
              return std::make_pair(std::move(vertical), std::move(diagonal));
            });
            return py::make_tuple(unwrap(std::move(v)), unwrap(std::move(d)));
          },
          "Copies of (V, D) of one request and layer (synchronises the "
          "stream)")
      .def_property_readonly("device", [](const rt::GpuStatePool &p) {
        return p.context()->device();
      });
}

/// A loaded GPU artifact. Device pointers and streams are passed as
/// integers, so that the module never links libcuda; manifest errors are
/// ValueErrors (input errors), the device's RuntimeErrors.
static void bindGpuProgram(py::module_ &m) {
  py::class_<rt::GpuWorkspace, std::shared_ptr<rt::GpuWorkspace>>(
      m, "GpuWorkspace",
      "Scratch buffers shared by the programs loaded with it")
      .def_static(
          "create",
          [](int device) {
            return unwrap<std::runtime_error>(rt::GpuWorkspace::create(device));
          },
          py::arg("device"))
      .def_property_readonly("bytes", &rt::GpuWorkspace::bytes)
      .def_property_readonly("buffers", &rt::GpuWorkspace::buffers)
      .def_property_readonly("device", [](const rt::GpuWorkspace &w) {
        return w.context()->device();
      });
  py::class_<rt::GpuProgram>(m, "GpuProgram")
      .def_static(
          "load",
          [](const std::string &dir, int device) {
            // Manifest errors are input errors; the rest is the device's.
            unwrap(rt::GpuManifest::read(dir));
            return unwrap<std::runtime_error>(
                rt::GpuProgram::load(dir, device));
          },
          py::arg("directory"), py::arg("device"))
      .def_static(
          "load_in",
          [](std::shared_ptr<rt::GpuWorkspace> workspace,
             const std::string &dir) {
            unwrap(rt::GpuManifest::read(dir));
            return unwrap<std::runtime_error>(
                rt::GpuProgram::load(std::move(workspace), dir));
          },
          py::arg("workspace"), py::arg("directory"),
          "Loads the artifact on the workspace's device, its scratch "
          "buffers from the workspace")
      .def(
          "run",
          [](rt::GpuProgram &program, rt::GpuStatePool *pool,
             const py::dict &inputs, const py::dict &outputs,
             const std::vector<int64_t> &requestIds, uintptr_t stream,
             int64_t layer) {
            auto in = deviceTensors(inputs);
            auto out = deviceTensors(outputs);
            check(withoutGil([&] {
              return pool ? program.run(*pool, in, out, requestIds,
                                        streamFrom(stream), layer)
                          : program.run(in, out, streamFrom(stream));
            }));
          },
          py::arg("pool").none(true), py::arg("inputs"), py::arg("outputs"),
          py::arg("request_ids"), py::arg("stream"), py::arg("layer") = 0)
      .def(
          "run_batch",
          [](rt::GpuProgram &program, rt::GpuStatePool &pool,
             const py::dict &inputs, const py::dict &outputs,
             uintptr_t stream, int64_t layer) {
            auto in = deviceTensors(inputs);
            auto out = deviceTensors(outputs);
            check(withoutGil([&] {
              return program.runBatch(pool, in, out, streamFrom(stream), layer);
            }));
          },
          py::arg("pool"), py::arg("inputs"), py::arg("outputs"),
          py::arg("stream"), py::arg("layer") = 0,
          "A step whose slots, accepted counts and resets are device "
          "tensors in `inputs` (docs/GPU-ABI.md, \"Device batches\")")
      .def(
          "run_batch_tensors",
          [](rt::GpuProgram &program, const py::dict &inputs,
             const py::dict &outputs, uintptr_t stream, int64_t layer) {
            auto in = deviceTensors(inputs);
            auto out = deviceTensors(outputs);
            check(withoutGil([&] {
              return program.runBatch(in, out, streamFrom(stream), layer);
            }));
          },
          py::arg("inputs"), py::arg("outputs"), py::arg("stream"),
          py::arg("layer") = 0,
          "A device-batch step on the caller's state tensors, given in "
          "`inputs` as state.<layer>.<field> (docs/GPU-ABI.md, \"State "
          "tensors\")")
      .def(
          "check",
          [](rt::GpuProgram &program, uintptr_t stream) {
            rt::Status status =
                withoutGil([&] { return program.check(streamFrom(stream)); });
            if (!status.ok())
              throw std::runtime_error(status.message());
          },
          py::arg("stream"))
      .def("reserve_captured_steps",
           [](rt::GpuProgram &program, int64_t count) {
             check(program.reserveCapturedSteps(count));
           })
      .def_property_readonly("captured_steps_left",
                             &rt::GpuProgram::capturedStepsLeft)
      .def_property("programmatic_launches",
                    &rt::GpuProgram::programmaticLaunchesEnabled,
                    &rt::GpuProgram::setProgrammaticLaunches)
      .def_property_readonly(
          "signature",
          [](const rt::GpuProgram &p) { return signatureOf(p.signature()); })
      .def_property_readonly(
          "manifest",
          [](const rt::GpuProgram &p) { return manifestDict(p.manifest()); })
      .def_property_readonly("chip", &rt::GpuProgram::chip)
      .def_property_readonly("layer_argument",
                             [](const rt::GpuProgram &p) {
                               return p.manifest().layerArgument;
                             })
      .def_property_readonly("status_outputs",
                             [](const rt::GpuProgram &p) {
                               std::vector<std::string> names;
                               for (int64_t k = 0;
                                    k < p.manifest().statusOutputs; ++k)
                                 names.push_back(rt::statusOutputName(k));
                               return names;
                             })
      .def_property_readonly("device", [](const rt::GpuProgram &p) {
        return p.context()->device();
      });
}

#ifdef SPIN_HAS_COMPILER
//===----------------------------------------------------------------------===//
// The compiler
//===----------------------------------------------------------------------===//

/// The flags `options` accepts, comma separated, for messages.
static std::string sparsifyFlags(mlir::spin::SparsifyPipelineOptions &options) {
  std::string flags;
  options.forEachOption([&](llvm::StringRef flag, auto &) {
    flags += (flags.empty() ? "" : ", ") + flag.str();
  });
  return flags;
}

/// The value names an enum option accepts, comma separated, for messages.
template <typename OptionT>
static std::string valueNames(OptionT &option) {
  std::string names;
  for (unsigned i = 0, e = option.getParser().getNumOptions(); i < e; ++i)
    names += (i ? ", " : "") + option.getParser().getOption(i).str();
  return names;
}

/// Sets `option` to the Python `value`, which must have the option's type:
/// a bool for bool options, an int (not a bool) in range for integer ones, an
/// int or float for doubles, a str for strings and, for enum options, one of
/// the value names the option declares (parsed by the option's own parser).
template <typename OptionT>
static void setOption(OptionT &option, llvm::StringRef flag,
                      py::handle value) {
  using T = std::decay_t<decltype(option.getValue())>;
  PyObject *object = value.ptr();
  std::string what = "spin-sparsify-pipeline option '" + flag.str() + "'";
  std::string got = py::repr(value).cast<std::string>();
  auto reject = [&](const char *type) {
    throw py::type_error(what + " takes " + type + ", got " + got);
  };
  bool isInt = PyIndex_Check(object) && !PyBool_Check(object);
  if constexpr (std::is_same_v<T, bool>) {
    if (!PyBool_Check(object))
      reject("a bool");
    option = object == Py_True;
  } else if constexpr (std::is_integral_v<T>) {
    if (!isInt)
      reject(std::is_signed_v<T> ? "an int" : "a non-negative int");
    py::int_ number = py::reinterpret_steal<py::int_>(PyNumber_Index(object));
    T parsed = std::is_signed_v<T> ? T(PyLong_AsLongLong(number.ptr()))
                                   : T(PyLong_AsUnsignedLongLong(number.ptr()));
    if (PyErr_Occurred()) {
      PyErr_Clear();
      raise(what + " is out of range for " +
            (std::is_signed_v<T> ? "int64" : "uint64") + ": " + got);
    }
    option = parsed;
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!isInt && !PyFloat_Check(object))
      reject("a float");
    option = value.cast<double>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!PyUnicode_Check(object))
      reject("a str");
    option = value.cast<std::string>();
  } else {
    static_assert(std::is_enum_v<T>, "an option type Python cannot set");
    if (!PyUnicode_Check(object))
      reject(("a str (one of " + valueNames(option) + ")").c_str());
    std::string name = value.cast<std::string>();
    T parsed{};
    if (option.getParser().findOption(name) == option.getParser().getNumOptions() ||
        option.getParser().parse(option, flag, name, parsed))
      raise(what + " has no value " + got + " (accepted: " +
            valueNames(option) + ")");
    option = parsed;
  }
}

/// The spin-sparsify-pipeline options of a compile call, set in `parsed`:
/// null for None (the graph compiles as written), else `&parsed`. A dict
/// sets each option (keys are flags, with '_' or '-') with its own type; a
/// str is parsed as pipeline option text ("sparsity=0.5 pooling=mean").
/// Raises ValueError for unknown keys and values, TypeError for values of
/// the wrong type.
static const mlir::spin::SparsifyPipelineOptions *
sparsifyOptions(const py::object &options,
                mlir::spin::SparsifyPipelineOptions &parsed) {
  if (options.is_none())
    return nullptr;
  if (py::isinstance<py::str>(options)) {
    std::string text = options.cast<std::string>();
    if (mlir::failed(parsed.parseFromString(text)))
      raise("invalid spin-sparsify-pipeline options: '" + text + "'");
    return &parsed;
  }
  if (!py::isinstance<py::dict>(options))
    throw py::type_error("spin-sparsify-pipeline options must be a dict, got " +
                         py::repr(options).cast<std::string>());
  for (auto [key, value] : options.cast<py::dict>()) {
    if (!py::isinstance<py::str>(key))
      throw py::type_error("spin-sparsify-pipeline option names are str, got " +
                           py::repr(key).cast<std::string>());
    std::string flag = key.cast<std::string>();
    std::replace(flag.begin(), flag.end(), '_', '-');
    bool known = false;
    parsed.forEachOption([&](llvm::StringRef name, auto &option) {
      if (name == flag) {
        known = true;
        setOption(option, name, value);
      }
    });
    if (!known)
      raise("unknown spin-sparsify-pipeline option " +
            py::repr(key).cast<std::string>() + " (accepted: " +
            sparsifyFlags(parsed) + ")");
  }
  return &parsed;
}

/// The compile entry points, built only with the compiler: JIT compilation
/// of CPU step programs (cached in memory and on disk), graph building, and
/// GPU artifacts. Compilation releases the GIL, so that other Python threads
/// go on meanwhile.
static void bindCompiler(py::module_ &m) {
  auto fromExecutable = [](std::shared_ptr<mlir::spin::CpuExecutable> exe) {
    Program program;
    program.program = &exe->program();
    program.graphIR = exe->graphIR();
    program.fromDiskCache = exe->fromDiskCache();
    program.owner = std::move(exe);
    return program;
  };
  m.def("clear_memory_cache", &mlir::spin::CpuExecutable::clearMemoryCache,
        "Forgets compiled programs held in this process (the disk cache stays)");
  m.def(
      "build_indexer_graph",
      [](int64_t heads, int64_t headDim, int64_t rows, int64_t topk,
         int64_t pageSize, int64_t maxPages, const std::string &keyFormat,
         int64_t layer, int64_t batch, const std::string &queryFormat) {
        mlir::spin::IndexerConfig config;
        config.heads = heads;
        config.headDim = headDim;
        config.rows = rows;
        config.topk = topk;
        config.pageSize = pageSize;
        config.maxPages = maxPages;
        config.keyFormat = keyFormat;
        config.layer = layer;
        config.batch = batch;
        config.queryFormat = queryFormat;
        return unwrap(mlir::spin::buildIndexerGraph(config));
      },
      py::arg("heads"), py::arg("head_dim"), py::arg("rows"), py::arg("topk"),
      py::arg("page_size"), py::arg("max_pages"), py::arg("key_format"),
      py::arg("layer"), py::arg("batch") = 0, py::arg("query_format") = "",
      "The dense graph of one indexer layer (function @indexer_layer), for "
      "`batch` requests per step (0: any batch, as CPU programs take), with "
      "queries of the key format's own type ('') or 'fp8' (fp8 keys)");
  m.def(
      "compile",
      [fromExecutable](const std::string &source, const std::string &function,
                       py::object options) {
        std::shared_ptr<mlir::spin::CpuExecutable> exe;
        mlir::spin::SparsifyPipelineOptions parsed;
        const mlir::spin::SparsifyPipelineOptions *sparsify =
            sparsifyOptions(options, parsed);
        return fromExecutable(unwrap(withoutGil([&] {
          return mlir::spin::CpuExecutable::compileCached(source, function,
                                                          sparsify);
        })));
      },
      py::arg("source"), py::arg("function"), py::arg("options") = py::none(),
      "JIT-compiles `function` of `source`; `options` are "
      "spin-sparsify-pipeline options ({'sparsity': 0.4, 'explore_policy': "
      "'block-age'}, or the text 'sparsity=0.4 ...') or None to compile the "
      "graph as written");
  m.def(
      "sparsify_options_text",
      [](py::object options) {
        mlir::spin::SparsifyPipelineOptions parsed;
        sparsifyOptions(options, parsed);
        std::string text;
        llvm::raw_string_ostream os(text);
        parsed.print(os);
        return text;
      },
      py::arg("options"),
      "The spin-sparsify-pipeline options `options` (a dict or option text) "
      "give, every option printed ('{block-size=64 ...}')");
  m.def("compiler_version", &mlir::spin::compilerVersion,
        "A hash of the compiler sources (keys the program caches)");
  m.def(
      "compile_gpu",
      [](const std::string &source, const std::string &function,
         py::object options, const std::vector<std::string> &chips,
         int64_t ptxVersion, const std::string &outDir, int64_t smCount,
         bool layerArgument, bool pagedState, bool fusedFp8Pages) {
        if (smCount <= 0)
          throw py::value_error("sm_count must be positive (got " +
                                std::to_string(smCount) + ")");
        mlir::spin::SparsifyPipelineOptions parsed;
        const mlir::spin::SparsifyPipelineOptions *sparsify =
            sparsifyOptions(options, parsed);
        mlir::spin::GpuCompileOptions gpu;
        gpu.chips = chips;
        gpu.ptxVersion = ptxVersion;
        gpu.smCount = smCount;
        gpu.layerArgument = layerArgument;
        gpu.pagedState = pagedState;
        gpu.fusedFp8Pages = fusedFp8Pages;
        check(withoutGil([&] {
          rt::StatusOr<mlir::spin::GpuArtifact> artifact =
              mlir::spin::compileGpuArtifact(source, function, sparsify, gpu);
          return artifact.ok() ? mlir::spin::writeGpuArtifact(*artifact, outDir)
                               : artifact.status();
        }));
      },
      py::arg("source"), py::arg("function"), py::arg("options"),
      py::arg("chips"), py::arg("ptx_version"), py::arg("out_dir"),
      py::arg("sm_count") = 132, py::arg("layer_argument") = false,
      py::arg("paged_state") = false, py::arg("fused_fp8_pages") = false,
      "Compiles `function` of `source` for the GPU (spin-compile): PTX per "
      "chip and manifest.json in `out_dir`; the scoring grids are sized for "
      "`sm_count` SMs; with `layer_argument` the step takes its layer at "
      "run time; with `paged_state` the state follows the KV pages; with "
      "`fused_fp8_pages` fp8 keys and scales come in one kv_cache input of "
      "the engines' page layout");
}
#endif

PYBIND11_MODULE(_spin, m) {
  m.doc() = "spin: SPIN sparse-attention indexers (native part)";
  spin::python::bindAbi(m);
#ifdef SPIN_HAS_COMPILER
  m.attr("has_compiler") = true;
#else
  m.attr("has_compiler") = false;
#endif
  // In this order: a signature names the classes bound before it.
  bindStatePool(m);
  bindProgram(m);
  bindManifest(m);
  bindGpuStatePool(m);
  bindGpuProgram(m);
#ifdef SPIN_HAS_COMPILER
  bindCompiler(m);
#endif
}
