// attnlab public API, all of it: configurations, models, tokenizers, data sources, training and
// comparison grids. Link the CMake target attnlab::attnlab (find_package(attnlab)).
#pragma once
#include "attnlab/compare.h"
#include "attnlab/config.h"
#include "attnlab/data.h"
#include "attnlab/error.h"
#include "attnlab/model.h"
#include "attnlab/tokenizer.h"
#include "attnlab/trainer.h"
#include "attnlab/version.h"
