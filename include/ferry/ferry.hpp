// SPDX-License-Identifier: MIT
/// @file ferry.hpp
/// @brief Everything of ferry's public API in one include.
#pragma once

#include "ferry/config.hpp"
#include "ferry/device.hpp"
#include "ferry/error.hpp"
#include "ferry/image.hpp"
#include "ferry/interop.hpp"
#include "ferry/pool.hpp"
#include "ferry/snapshot.hpp"
#include "ferry/transfer.hpp"
