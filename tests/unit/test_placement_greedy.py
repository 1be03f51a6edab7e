"""The pure greedy-by-bytes rule (no TensorFlow)."""

from __future__ import annotations

from types import SimpleNamespace

from training.cluster.placement import GreedyByBytes, greedy_assign, op_nbytes
from training.models.sizes import mlp_shapes


def test_fewest_bytes_wins_lowest_index_on_ties() -> None:
    assert greedy_assign([100, 10, 10, 10, 100], 2) == [0, 1, 1, 1, 1]
    assert greedy_assign([5, 5, 5], 3) == [0, 1, 2]


def test_mlp_kernels_do_not_all_land_on_one_ps() -> None:
    """Round-robin by count puts all kernels on ps 0 and all biases on ps 1; greedy does not."""
    shapes = mlp_shapes({"input_dim": 64, "hidden": "256,256"})
    where = greedy_assign([s.nbytes for s in shapes], 2)
    loads = [sum(s.nbytes for s, w in zip(shapes, where, strict=True) if w == i) for i in range(2)]
    assert min(loads) > 0.25 * max(loads)  # greedy in creation order: not optimal, never lopsided
    round_robin = [sum(s.nbytes for j, s in enumerate(shapes) if j % 2 == i) for i in range(2)]
    assert min(round_robin) < 0.01 * max(round_robin)


class _Proto:
    """Stands in for a TensorShapeProto (a real one is checked in the TF placement test)."""

    def __init__(self, dims: list[int]) -> None:
        self.dim = [SimpleNamespace(size=d) for d in dims]
        self.unknown_rank = False


def _op(name: str, dims: list[int], dtype_size: int = 4) -> SimpleNamespace:
    attrs = {"shape": _Proto(dims), "dtype": SimpleNamespace(size=dtype_size)}
    return SimpleNamespace(name=name, get_attr=attrs.__getitem__)


def test_strategy_callable_reads_shape_and_dtype() -> None:
    assert op_nbytes(_op("a", [3, 4], 8)) == 96
    assert op_nbytes(_op("scalar", [])) == 4
    strategy = GreedyByBytes(2)
    picks = [strategy(_op(n, d)) for n, d in [("w0", [100, 10]), ("b0", [10]), ("w1", [10, 10]), ("b1", [10])]]
    assert picks == [0, 1, 1, 1]
    assert strategy.loads == [4000, 480]
    assert strategy.placed[0] == ("w0", 0, 4000)
