"""Reverse-mode automatic differentiation over the graph recorded by Function.apply."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

if TYPE_CHECKING:  # pragma: no cover
    from .tensor import Tensor


class Context:
    """Per-call storage a Function's forward leaves for its backward."""

    def __init__(self, no_grad: bool = False) -> None:
        self.no_grad = no_grad
        self.saved_values: tuple[Any, ...] = ()

    def save_for_backward(self, *values: Any) -> None:
        if not self.no_grad:
            self.saved_values = values

    @property
    def saved_tensors(self) -> tuple[Any, ...]:
        return self.saved_values


class History:
    """How a tensor was made: the Function, its Context and its inputs (None for a leaf)."""

    __slots__ = ("last_fn", "ctx", "inputs")

    def __init__(self, last_fn=None, ctx: Context | None = None, inputs: tuple = ()) -> None:
        self.last_fn = last_fn
        self.ctx = ctx
        self.inputs = inputs


def topological_sort(root: "Tensor") -> list["Tensor"]:
    """Tensors reachable from `root` that need gradients, each after everything that uses it."""
    order: list = []
    seen: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if node.unique_id in seen or not node.requires_grad():
            continue
        seen.add(node.unique_id)
        stack.append((node, True))
        if not node.is_leaf():
            for parent in node.history.inputs:
                if parent.unique_id not in seen and parent.requires_grad():
                    stack.append((parent, False))
    order.reverse()
    return order


def backpropagate(root: "Tensor", grad: "Tensor") -> None:
    """Push `grad` (d out / d root) back through the graph; leaves accumulate into `.grad`."""
    derivs: dict[int, Any] = {root.unique_id: grad}
    for node in topological_sort(root):
        d = derivs.pop(node.unique_id, None)
        if d is None:
            continue
        if node.is_leaf():
            node.accumulate_derivative(d)
            continue
        for parent, g in node.chain_rule(d):
            if parent.unique_id in derivs:
                derivs[parent.unique_id] = derivs[parent.unique_id].backend.add_zip(derivs[parent.unique_id], g)
            else:
                derivs[parent.unique_id] = g


def parents_of(values: Iterable[Any]) -> tuple:
    from .tensor import Tensor

    return tuple(v for v in values if isinstance(v, Tensor))
