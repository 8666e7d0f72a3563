//===- StepProgram.cpp - run one compiled decode step ---------------------===//
//
// Part of the spin project: SPIN (Shadow Predictive Indexer) for
// indexer-based sparse attention.
//
//===----------------------------------------------------------------------===//

#include "spin/Runtime/StepProgram.h"

#include "spin/Runtime/Span.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <iterator>
#include <sstream>

namespace spin::runtime {

static_assert(sizeof(void *) == sizeof(int64_t),
              "memref descriptors are built as 64-bit words");

bool isPagedCacheInput(const std::string &name) {
  auto is = [&](const std::string &base) {
    return name == base || name.rfind(base + "_", 0) == 0;
  };
  return is("keys") || is("scales") || is("kv_cache");
}

std::string shapeString(const std::vector<int64_t> &shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i)
    os << (i ? ", " : "") << (shape[i] < 0 ? std::string("?")
                                           : std::to_string(shape[i]));
  os << "]";
  return os.str();
}

namespace {

/// A memref descriptor of any rank as 64-bit words: allocated, aligned,
/// offset, sizes..., strides... (MLIR's C layout).
std::vector<int64_t> descriptor(void *data, const std::vector<int64_t> &shape) {
  size_t rank = shape.size();
  std::vector<int64_t> words(3 + 2 * rank);
  std::memcpy(&words[0], &data, sizeof(void *));
  std::memcpy(&words[1], &data, sizeof(void *));
  words[2] = 0;
  int64_t stride = 1;
  for (size_t i = rank; i-- > 0;) {
    words[3 + i] = shape[i];
    words[3 + rank + i] = stride;
    stride *= shape[i];
  }
  return words;
}

} // namespace

StepProgram::StepProgram(PackedFunction function, std::vector<ArgSpec> signature)
    : function_(function), signature_(std::move(signature)) {}

int64_t StepProgram::rows() const {
  for (const ArgSpec &arg : signature_)
    if (arg.role == ArgSpec::Role::Positions && arg.shape.size() == 2)
      return arg.shape[1];
  return -1;
}

bool StepProgram::commits() const {
  return std::any_of(signature_.begin(), signature_.end(), [](const ArgSpec &a) {
    return a.role == ArgSpec::Role::Accepted;
  });
}

/// Positions against lengths and the state capacity, for one lengths input
/// (`lengths` or `lengths_k`); `width`, when given, is the slot count of the
/// scores the graph reads for them.
static Status checkRows(const StatePool &pool, const std::string &lengthsName,
                        const TensorRef &lengths, const TensorRef *positions,
                        int64_t width) {
  int64_t rows = lengths.shape[1], capacity = pool.options().capacity;
  if (rows > pool.options().maxRows)
    return Status::error("the step has " + std::to_string(rows) +
                         " rows per request but the state pool buffers at most " +
                         std::to_string(pool.options().maxRows));
  if (positions && positions->shape[1] != rows)
    return Status::error("input 'positions' has " +
                         std::to_string(positions->shape[1]) + " rows but '" +
                         lengthsName + "' has " + std::to_string(rows));
  const auto *n = static_cast<const int32_t *>(lengths.data);
  const auto *p =
      positions ? static_cast<const int32_t *>(positions->data) : nullptr;
  for (int64_t b = 0; b < lengths.shape[0]; ++b)
    for (int64_t r = 0; r < rows; ++r) {
      int64_t len = n[b * rows + r];
      std::string at = "[" + std::to_string(b) + "][" + std::to_string(r) + "]";
      if (len < 0 && width < 0)
        return Status::error(lengthsName + at + " = " + std::to_string(len) +
                             " must be >= 0");
      if (len < 0 || (width >= 0 && len > width))
        return Status::error(lengthsName + at + " = " + std::to_string(len) +
                             " is outside [0, " + std::to_string(width) +
                             "], the slots of the scores");
      if (!p)
        continue;
      int64_t pos = p[b * rows + r];
      // A row of no visible slots still has a position: the message for a
      // negative one must not say "at least -1".
      if (pos < 0)
        return Status::error("positions" + at + " = " + std::to_string(pos) +
                             " must be >= 0");
      if (len > pos + 1)
        return Status::error("positions" + at + " = " + std::to_string(pos) +
                             " must be at least " + lengthsName + at +
                             " - 1 = " + std::to_string(len - 1));
      if (pos >= capacity)
        return Status::error("positions" + at + " = " + std::to_string(pos) +
                             " exceeds the state capacity of " +
                             std::to_string(capacity) + " slots");
    }
  return Status::success();
}

/// `tensor` (input `name`) has rank `rank`, or at least `rank` if `orMore`;
/// `layout` names its dims for the message.
static Status checkRank(const std::string &name, const TensorRef &tensor,
                        size_t rank, bool orMore, const char *layout) {
  size_t actual = tensor.shape.size();
  if (actual == rank || (orMore && actual > rank))
    return Status::success();
  return Status::error("input '" + name + "' has shape " +
                       shapeString(tensor.shape) + ": " + layout);
}

/// Lengths against the block table, and every visible page against the key
/// cache.
static Status checkPages(const TensorRef &keys, const TensorRef &table,
                         const TensorRef &lengths, const std::string &suffix) {
  int64_t pages = keys.shape[0], pageSize = keys.shape[1];
  int64_t tableWidth = table.shape[1], rows = lengths.shape[1];
  std::string lengthsName = "lengths" + suffix, tableName = "block_table" + suffix;
  const auto *n = static_cast<const int32_t *>(lengths.data);
  const auto *bt = static_cast<const int32_t *>(table.data);
  for (int64_t b = 0; b < lengths.shape[0]; ++b) {
    int64_t widest = 0;
    for (int64_t r = 0; r < rows; ++r) {
      int64_t len = n[b * rows + r];
      if (len > tableWidth * pageSize)
        return Status::error(lengthsName + "[" + std::to_string(b) + "][" +
                             std::to_string(r) + "] = " + std::to_string(len) +
                             " is outside [0, " +
                             std::to_string(tableWidth * pageSize) +
                             "] (block table width " + std::to_string(tableWidth) +
                             " x page size " + std::to_string(pageSize) + ")");
      widest = std::max(widest, len);
    }
    int64_t visiblePages = (widest + pageSize - 1) / pageSize;
    for (int64_t j = 0; j < visiblePages; ++j) {
      int32_t page = bt[b * tableWidth + j];
      if (page < 0 || page >= pages)
        return Status::error(tableName + "[" + std::to_string(b) + "][" +
                             std::to_string(j) + "] = " + std::to_string(page) +
                             " is not a page of the key cache [0, " +
                             std::to_string(pages) + ")");
    }
  }
  return Status::success();
}

/// One input or output (`what`) against its signature entry: data, element
/// type, rank and static sizes. Every batched tensor's dim 0 must agree
/// with `batch` (set by the first one; -1 until then), since `?` dims are
/// the batch size the graph was written for.
static Status checkTensor(const ArgSpec &arg, const TensorRef &tensor,
                          const char *what, int64_t &batch) {
  if (!tensor.data && tensor.numElements() > 0)
    return Status::error(std::string(what) + " '" + arg.name + "' has no data");
  if (tensor.dtype != arg.dtype)
    return Status::error(std::string(what) + " '" + arg.name + "' has element type " +
                         dtypeName(tensor.dtype) + ", expected " +
                         dtypeName(arg.dtype));
  if (tensor.shape.size() != arg.shape.size())
    return Status::error(std::string(what) + " '" + arg.name + "' has shape " +
                         shapeString(tensor.shape) + ", expected rank " +
                         std::to_string(arg.shape.size()) + " " +
                         shapeString(arg.shape));
  for (size_t d = 0; d < arg.shape.size(); ++d) {
    if (tensor.shape[d] < 0)
      return Status::error(std::string(what) + " '" + arg.name +
                           "' has a negative size in " + shapeString(tensor.shape));
    if (arg.shape[d] >= 0 && tensor.shape[d] != arg.shape[d])
      return Status::error(std::string(what) + " '" + arg.name + "' has shape " +
                           shapeString(tensor.shape) + ", expected " +
                           shapeString(arg.shape));
  }
  // A scalar has no batch dimension to agree on.
  bool batched = !isPagedCacheInput(arg.name) && !arg.shape.empty();
  if (batched) {
    if (batch < 0)
      batch = tensor.shape[0];
    else if (tensor.shape[0] != batch)
      return Status::error(std::string(what) + " '" + arg.name + "' has batch size " +
                           std::to_string(tensor.shape[0]) + " but other inputs have " +
                           std::to_string(batch));
  }
  return Status::success();
}

/// A state argument against the pool: the layer exists, the pool keeps
/// last-observed ages if the program reads them, and its per-block buffers
/// hold the layer's SPIN blocks.
static Status checkStateArg(const StatePool &pool, const ArgSpec &arg) {
  if (arg.layer < 0 || arg.layer >= pool.options().numLayers)
    return Status::error("the program uses state of layer " +
                         std::to_string(arg.layer) + " but the pool has " +
                         std::to_string(pool.options().numLayers) + " layers");
  const char *lastObserved = stateFieldName(StateField::LastObserved);
  if (arg.name == lastObserved && !pool.options().lastObserved)
    return Status::error(
        "the program explores by block age (staleness-score or "
        "block-age) and needs per-block " +
        std::string(lastObserved) + " state on layer " +
        std::to_string(arg.layer) +
        ", but the state pool was created without it (set "
        "StatePoolOptions::lastObserved)");
  int64_t capacity = pool.options().capacity;
  if (arg.blockSize > 0 &&
      pool.numBlocks() < (capacity + arg.blockSize - 1) / arg.blockSize)
    return Status::error(
        "the state pool's block size (" +
        std::to_string(pool.options().blockSize) + ") is larger than layer " +
        std::to_string(arg.layer) + "'s SPIN block size (" +
        std::to_string(arg.blockSize) +
        "): its per-block buffers cannot hold the program's blocks");
  return Status::success();
}

/// Shapes and element types against the signature, in its order; a reset
/// input may be left out, every other named input and output must be given,
/// and no input may be unknown to the signature.
static Status checkSignature(const std::vector<ArgSpec> &signature,
                             const StatePool &pool,
                             const std::map<std::string, TensorRef> &inputs,
                             const std::map<std::string, TensorRef> &outputs) {
  // Per-request state is found through the request ids: without them every
  // row would step on the state of slot 0.
  auto hasRole = [&](ArgSpec::Role role) {
    return std::any_of(signature.begin(), signature.end(),
                       [&](const ArgSpec &a) { return a.role == role; });
  };
  if (!hasRole(ArgSpec::Role::RequestIds))
    for (const ArgSpec &arg : signature)
      if (arg.role == ArgSpec::Role::State ||
          arg.role == ArgSpec::Role::Slots ||
          arg.role == ArgSpec::Role::Accepted)
        return Status::error("the program binds per-request state ('" +
                             arg.name + "') but takes no " +
                             argRoleName(ArgRole::RequestIds) +
                             " argument: it cannot tell the requests' state "
                             "apart");
  int64_t batch = -1;
  for (const ArgSpec &arg : signature) {
    bool named = arg.role == ArgSpec::Role::Input ||
                 arg.role == ArgSpec::Role::Positions ||
                 arg.role == ArgSpec::Role::RequestIds ||
                 arg.role == ArgSpec::Role::Reset;
    if (named) {
      auto it = inputs.find(arg.name);
      if (it == inputs.end()) {
        if (arg.role == ArgSpec::Role::Reset)
          continue;
        return Status::error("missing input '" + arg.name + "' " +
                             shapeString(arg.shape) + " " + dtypeName(arg.dtype));
      }
      if (Status s = checkTensor(arg, it->second, "input", batch); !s.ok())
        return s;
    } else if (arg.role == ArgSpec::Role::Output) {
      auto it = outputs.find(arg.name);
      if (it == outputs.end())
        return Status::error("missing output '" + arg.name + "'");
      if (Status s = checkTensor(arg, it->second, "output", batch); !s.ok())
        return s;
    } else if (arg.role == ArgSpec::Role::State) {
      if (Status s = checkStateArg(pool, arg); !s.ok())
        return s;
    }
  }
  for (const auto &[name, tensor] : inputs) {
    bool known = std::any_of(signature.begin(), signature.end(),
                             [&](const ArgSpec &a) { return a.name == name; });
    if (!known)
      return Status::error("unknown input '" + name + "'");
  }
  return Status::success();
}

/// Pages, for every indexer's group of inputs (keys, scales, block_table,
/// lengths, or keys_k, ... of the k-th indexer, falling back to the shared
/// block_table and lengths): the scales match the keys, and every page a
/// row can see is one of the key cache's.
static Status checkPageInputs(const std::map<std::string, TensorRef> &inputs) {
  for (const auto &[name, keys] : inputs) {
    if (name.rfind("keys", 0) != 0 || !isPagedCacheInput(name))
      continue;
    std::string suffix = name.substr(4);
    auto pick = [&](const std::string &base) -> const TensorRef * {
      auto own = inputs.find(base + suffix);
      if (own != inputs.end())
        return &own->second;
      auto shared = inputs.find(base);
      return shared == inputs.end() ? nullptr : &shared->second;
    };
    const TensorRef *table = pick("block_table"), *lengths = pick("lengths");
    if (!table || !lengths)
      return Status::error("cannot check the pages read through '" + name +
                           "': the graph has no matching block_table and "
                           "lengths inputs");
    if (Status s = checkRank(name, keys, 2, true,
                             "a paged cache needs rank 2 or more [pages, page "
                             "size, ...]");
        !s.ok())
      return s;
    if (keys.shape[1] == 0)
      return Status::error("input '" + name + "' has shape " +
                           shapeString(keys.shape) +
                           ": its pages (dim 1) must hold at least one slot");
    if (Status s = checkRank(inputs.count("block_table" + suffix)
                                 ? "block_table" + suffix
                                 : "block_table",
                             *table, 2, false,
                             "expected rank 2 [batch, pages per request]");
        !s.ok())
      return s;
    if (Status s = checkRank(inputs.count("lengths" + suffix)
                                 ? "lengths" + suffix
                                 : "lengths",
                             *lengths, 2, false, "expected rank 2 [batch, rows]");
        !s.ok())
      return s;
    auto scales = inputs.find("scales" + suffix);
    if (scales != inputs.end())
      if (Status s = checkRank(scales->first, scales->second, 2, true,
                               "a paged cache needs rank 2 or more [pages, "
                               "page size, ...]");
          !s.ok())
        return s;
    if (scales != inputs.end() &&
        (scales->second.shape[0] != keys.shape[0] ||
         scales->second.shape[1] != keys.shape[1]))
      return Status::error("input 'scales" + suffix + "' has shape " +
                           shapeString(scales->second.shape) + " but '" + name +
                           "' holds " + std::to_string(keys.shape[0]) +
                           " pages of " + std::to_string(keys.shape[1]) +
                           " slots");
    if (Status s = checkPages(keys, *table, *lengths, suffix);
        !s.ok())
      return s;
  }
  return Status::success();
}

/// Rows, for every lengths input: positions and capacity (and the width of
/// the scores a hand-written graph takes directly). Dense programs take no
/// positions.
static Status checkRowInputs(const StatePool &pool,
                             const std::map<std::string, TensorRef> &inputs) {
  auto positionsIt = inputs.find(argRoleName(ArgRole::Positions));
  const TensorRef *positions =
      positionsIt == inputs.end() ? nullptr : &positionsIt->second;
  if (positions)
    if (Status s = checkRank(positionsIt->first, *positions, 2, false,
                             "expected rank 2 [batch, rows]");
        !s.ok())
      return s;
  for (const auto &[name, lengths] : inputs) {
    if (name != "lengths" && name.rfind("lengths_", 0) != 0)
      continue;
    if (Status s = checkRank(name, lengths, 2, false,
                             "expected rank 2 [batch, rows]");
        !s.ok())
      return s;
    auto scores = inputs.find("scores" + name.substr(7));
    int64_t width = scores == inputs.end() || scores->second.shape.size() != 3
                        ? -1
                        : scores->second.shape[2];
    if (Status s = checkRows(pool, name, lengths, positions, width); !s.ok())
      return s;
  }
  return Status::success();
}

/// Outputs are [B, R, ...] (docs/Runtime-ABI.md): the compiled code writes R
/// rows per request, R from the lengths of the output's indexer (`lengths_k`
/// for `topk_k`, else `lengths`), whatever size a run-time dim 1 was given.
static Status checkOutputRows(const std::vector<ArgSpec> &signature,
                              const std::map<std::string, TensorRef> &inputs,
                              const std::map<std::string, TensorRef> &outputs) {
  for (const ArgSpec &arg : signature) {
    if (arg.role != ArgSpec::Role::Output || arg.shape.size() < 2)
      continue;
    size_t underscore = arg.name.rfind('_');
    std::string suffix;
    if (underscore != std::string::npos && underscore + 1 < arg.name.size() &&
        arg.name.find_first_not_of("0123456789", underscore + 1) ==
            std::string::npos)
      suffix = arg.name.substr(underscore);
    auto lengths = inputs.find("lengths" + suffix);
    if (lengths == inputs.end())
      lengths = inputs.find("lengths");
    if (lengths == inputs.end() || lengths->second.shape.size() != 2)
      continue;
    const TensorRef &out = outputs.at(arg.name);
    if (out.shape[1] != lengths->second.shape[1])
      return Status::error("output '" + arg.name + "' has shape " +
                           shapeString(out.shape) + " but '" + lengths->first +
                           "' has " + std::to_string(lengths->second.shape[1]) +
                           " rows per request");
  }
  return Status::success();
}

/// Everything the compiled step assumes of its arguments, checked before it
/// runs: the signature first, then the values (docs/Runtime-ABI.md): every
/// lengths input against the block table and the pages, then against the
/// positions and the state capacity.
Status StepProgram::checkInputs(
    const StatePool &pool, const std::map<std::string, TensorRef> &inputs,
    const std::map<std::string, TensorRef> &outputs) const {
  if (Status s = checkSignature(signature_, pool, inputs, outputs); !s.ok())
    return s;
  if (Status s = checkPageInputs(inputs); !s.ok())
    return s;
  if (Status s = checkRowInputs(pool, inputs); !s.ok())
    return s;
  return checkOutputRows(signature_, inputs, outputs);
}

Status StepProgram::run(StatePool &pool,
                        const std::map<std::string, TensorRef> &inputs,
                        const std::map<std::string, TensorRef> &outputs) const {
  if (Status s = checkInputs(pool, inputs, outputs); !s.ok())
    return s;
  // The batch size: from any batched input (all agree, checked above).
  int64_t batch = 0;
  for (const ArgSpec &arg : signature_)
    if ((arg.role == ArgSpec::Role::Input || arg.role == ArgSpec::Role::RequestIds) &&
        !isPagedCacheInput(arg.name) && inputs.count(arg.name) &&
        !inputs.at(arg.name).shape.empty()) {
      batch = inputs.at(arg.name).shape[0];
      break;
    }
  // The state layers this program reads and writes.
  std::vector<int64_t> layers;
  for (const ArgSpec &arg : signature_)
    if (arg.role == ArgSpec::Role::State &&
        std::find(layers.begin(), layers.end(), arg.layer) == layers.end())
      layers.push_back(arg.layer);
  // Stateless (dense) programs take no request ids and touch no state.
  std::vector<int64_t> requests;
  auto ids = inputs.find(argRoleName(ArgRole::RequestIds));
  if (ids != inputs.end()) {
    const auto *idData = static_cast<const int64_t *>(ids->second.data);
    requests.assign(idData, idData + batch);
    if (Status s = pool.beginStep(Span<int64_t>(requests), commits(),
                                  Span<int64_t>(layers));
        !s.ok())
      return s;
  }

  // Per-request values the runtime fills: slots, accepted counts, resets.
  std::vector<int32_t> slots(batch), accepted(batch, 0);
  std::vector<uint8_t> noReset(batch, 0);
  for (int64_t b = 0; b < static_cast<int64_t>(requests.size()); ++b) {
    slots[b] = *pool.slotOf(requests[b]);
    if (auto count = pool.recordedCommit(requests[b]))
      accepted[b] = *count;
  }

  std::deque<std::vector<int64_t>> descriptors;
  std::deque<void *> pointers;
  std::vector<void *> args;
  auto bind = [&](void *data, const std::vector<int64_t> &shape) {
    descriptors.push_back(descriptor(data, shape));
    pointers.push_back(descriptors.back().data());
    args.push_back(&pointers.back());
  };
  for (const ArgSpec &arg : signature_) {
    switch (arg.role) {
    case ArgSpec::Role::Input:
    case ArgSpec::Role::Positions:
    case ArgSpec::Role::RequestIds: {
      const TensorRef &t = inputs.at(arg.name);
      bind(t.data, t.shape);
      break;
    }
    case ArgSpec::Role::Reset: {
      auto it = inputs.find(arg.name);
      if (it != inputs.end())
        bind(it->second.data, it->second.shape);
      else
        bind(noReset.data(), {batch});
      break;
    }
    case ArgSpec::Role::Accepted:
      bind(accepted.data(), {batch});
      break;
    case ArgSpec::Role::Slots:
      bind(slots.data(), {batch});
      break;
    case ArgSpec::Role::State: {
      LayerBuffers layer = pool.layer(arg.layer);
      std::optional<StateField> field = stateFieldFromName(arg.name);
      if (!field) {
        pool.endStep(Span<int64_t>(requests), Span<int64_t>(layers));
        return Status::error("unknown state field '" + arg.name + "'");
      }
      bind(layer.field(*field), stateFieldShape(*field, layer.sizes()));
      break;
    }
    case ArgSpec::Role::Output: {
      const TensorRef &t = outputs.at(arg.name);
      bind(t.data, t.shape);
      break;
    }
    }
  }
  function_(args.data());
  pool.endStep(Span<int64_t>(requests), Span<int64_t>(layers));
  return Status::success();
}

} // namespace spin::runtime
