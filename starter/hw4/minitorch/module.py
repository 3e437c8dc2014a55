"""Module and Parameter: a tree of modules holding trainable tensors."""
from __future__ import annotations

from typing import Any, Iterator


class Parameter:
    """A trainable value (a leaf Tensor that requires grad)."""

    def __init__(self, value: Any = None, name: str | None = None) -> None:
        self.value = value
        self.name = name
        if hasattr(value, "requires_grad_"):
            value.requires_grad_(True)

    def update(self, value: Any) -> None:
        self.value = value
        if hasattr(value, "requires_grad_"):
            value.requires_grad_(True)

    def __repr__(self) -> str:
        return f"Parameter({self.value!r})"


class Module:
    def __init__(self) -> None:
        self.__dict__["_modules"] = {}
        self.__dict__["_parameters"] = {}
        self.__dict__["training"] = True

    def __setattr__(self, key: str, val: Any) -> None:
        if "_modules" not in self.__dict__:
            Module.__init__(self)
        if isinstance(val, Parameter):
            self.__dict__["_parameters"][key] = val
        elif isinstance(val, Module):
            self.__dict__["_modules"][key] = val
        else:
            super().__setattr__(key, val)

    def __getattr__(self, key: str) -> Any:
        d = self.__dict__
        if key in d.get("_parameters", {}):
            return d["_parameters"][key]
        if key in d.get("_modules", {}):
            return d["_modules"][key]
        raise AttributeError(key)

    def modules(self) -> list["Module"]:
        return list(self.__dict__["_modules"].values())

    def children(self) -> Iterator["Module"]:
        return iter(self.modules())

    def train(self) -> None:
        self.__dict__["training"] = True
        for m in self.modules():
            m.train()

    def eval(self) -> None:
        self.__dict__["training"] = False
        for m in self.modules():
            m.eval()

    def named_parameters(self) -> list[tuple[str, Parameter]]:
        out = list(self.__dict__["_parameters"].items())
        for name, m in self.__dict__["_modules"].items():
            out.extend((f"{name}.{n}", p) for n, p in m.named_parameters())
        return out

    def parameters(self) -> list[Parameter]:
        return [p for _, p in self.named_parameters()]

    def add_parameter(self, k: str, v: Any) -> Parameter:
        p = Parameter(v, k)
        self.__dict__["_parameters"][k] = p
        return p

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError
