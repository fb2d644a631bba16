# SPDX-License-Identifier: MIT
"""Stand-ins that let TorchRec's own classes import and run beside a torch for which no
fbgemm-gpu is built: fbgemm_gpu, tensordict and pyre_extensions become inert modules, and
fbgemm's asynchronous_complete_cumsum (the one op a KeyedJaggedTensor needs) is registered as
plain torch. ``install()`` before torchrec imports; it returns the op's library, which must be
kept alive."""
import importlib.abc
import importlib.machinery
import sys
import types

import torch


class _InertClass(type):
    """A stand-in class: its attributes (enum members, constants) are inert modules."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Inert(f"{cls.__name__}.{name}")


class _Inert(types.ModuleType):
    """A stand-in module: every attribute is another inert module (a class, a function or a
    value as far as an import-time reference needs)."""

    __path__: list = []

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        # A capitalized name is a class nothing is an instance of (TorchRec tests
        # isinstance(x, TensorDict)); any other is another inert module.
        sub = _InertClass(name, (), {}) if name[:1].isupper() else _Inert(f"{self.__name__}.{name}")
        setattr(self, name, sub)
        return sub

    def __call__(self, *args, **kwargs):
        return args[0] if len(args) == 1 and callable(args[0]) and not kwargs else self

    def __mro_entries__(self, bases):
        return (object,)

    def __getitem__(self, item):
        return self

    def __or__(self, other):
        return self

    __ror__ = __or__


class _StandIns(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    roots = ("fbgemm_gpu", "tensordict", "pyre_extensions")

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in self.roots:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return _Inert(spec.name)

    def exec_module(self, module):
        pass


def install():
    sys.meta_path.insert(0, _StandIns())
    lib = torch.library.Library("fbgemm", "FRAGMENT")
    if not hasattr(torch.ops.fbgemm, "asynchronous_complete_cumsum"):
        lib.define("asynchronous_complete_cumsum(Tensor t_in) -> Tensor")

        def cumsum(t):
            return torch.cat([torch.zeros(1, dtype=t.dtype, device=t.device), torch.cumsum(t, 0).to(t.dtype)])
        lib.impl("asynchronous_complete_cumsum", cumsum, "CompositeExplicitAutograd")
    return lib


