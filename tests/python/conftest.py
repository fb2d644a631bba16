# SPDX-License-Identifier: MIT
"""Fixtures shared by the Python suites."""
import pytest
