# SPDX-License-Identifier: MIT
"""ferry.Error: the one exception type of the ferry package."""

from __future__ import annotations

import os
import sys

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def caller_location() -> tuple[str, int]:
    """The file and line of the innermost frame outside the ferry package.

    ferry's own Python layers (ferry.torch, this module) are skipped so that an error names
    the line of the program that called ferry, as the C++ API does with std::source_location.
    """
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not os.path.abspath(filename).startswith(_PACKAGE_DIR + os.sep):
            return filename, frame.f_lineno
        frame = frame.f_back
    return "<unknown>", 0


class Error(RuntimeError):
    """Every failure ferry reports, from its C++ core or its Python layers.

    Attributes:
        code: the ``ferry::ErrorCode`` name ("invalid_argument", "out_of_memory",
            "unsupported", "device_lost", "timeout", "backend_error", "internal_error").
        message: what was wrong, naming the function that detected it.
        call: the vendor call that failed ("" for argument errors).
        filename, lineno: where the program called ferry (the innermost frame outside the
            ferry package).
    """

    def __init__(self, code: str, message: str, call: str = "", filename: str | None = None,
                 lineno: int | None = None) -> None:
        if filename is None:
            filename, lineno = caller_location()
        self.code = code
        self.message = message
        self.call = call
        self.filename = filename
        self.lineno = lineno if lineno is not None else 0
        text = f"ferry: {code}: {message}"
        if call:
            text += f" (call: {call})"
        text += f" [at {self.filename}:{self.lineno}]"
        super().__init__(text)

    def __reduce__(self):
        return (type(self), (self.code, self.message, self.call, self.filename, self.lineno))
