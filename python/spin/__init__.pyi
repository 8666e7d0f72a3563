"""Type stubs of the spin package (see __init__.py for the documentation)."""

from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

ArrayLike = Any  # numpy.ndarray or torch.Tensor

has_compiler: bool

class Program:
    @property
    def signature(self) -> List[Dict[str, Any]]: ...
    @property
    def graph_ir(self) -> str: ...
    @property
    def from_disk_cache(self) -> bool: ...
    def run(self, state: State, **inputs: ArrayLike) -> Dict[str, np.ndarray]: ...

def compile(mlir_text: str, function: str,
            pipeline_options: Optional[Dict[str, Any]] = ...,
            target: str = ...) -> Program: ...

def new_state(capacity_slots: int, layers: int = ..., max_requests: int = ...,
              rows: int = ..., block_size: int = ...) -> State: ...

class State:
    capacity: int
    layers: int
    rows: int
    block_size: int
    def add(self, request_id: int) -> None: ...
    def reset(self, request_id: int) -> None: ...
    def commit(self, request_id: int, accepted: int) -> None: ...
    def release(self, request_id: int) -> None: ...
    def iteration(self, request_id: int, layer: int = ...) -> int: ...
    def ema(self, request_id: int, layer: int = ...) -> Tuple[np.ndarray, np.ndarray]: ...
    def __contains__(self, request_id: int) -> bool: ...
    def __len__(self) -> int: ...
    def close(self) -> None: ...

class Indexer:
    heads: int
    head_dim: int
    rows: int
    block_size: int
    page_size: int
    topk: int
    key_format: str
    device: str
    dense: bool
    def __init__(self, heads: int = ..., head_dim: int = ..., block_size: int = ...,
                 topk: int = ..., sparsity: float = ..., ema_decay: float = ...,
                 explore: float = ..., seed: int = ..., pooling: str = ...,
                 reduction: str = ..., mtp_mask: str = ..., mtp_update: str = ...,
                 key_format: str = ..., page_size: Optional[int] = ...,
                 rows: int = ..., device: str = ..., dense: bool = ...) -> None: ...
    def program(self, layer: int, max_pages: int) -> Program: ...
    def new_state(self, capacity_slots: int, layers: int = ...,
                  max_requests: int = ...) -> State: ...
    def __call__(self, q: ArrayLike, w: ArrayLike, keys: ArrayLike,
                 block_table: ArrayLike, lengths: ArrayLike, positions: ArrayLike,
                 state: State, *, request_ids: ArrayLike,
                 scales: Optional[ArrayLike] = ..., layer: int = ...,
                 return_sparsity: bool = ...) -> Union[ArrayLike, Tuple[ArrayLike, ArrayLike]]: ...
