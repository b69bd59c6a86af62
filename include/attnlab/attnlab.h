// attnlab public API, all of it: configurations, models, tokenizers, data sources, training,
// evaluation, diagnostics, synthetic tasks, benchmarks and comparison grids. Link the CMake target
// attnlab::attnlab (find_package(attnlab)).
#pragma once
#include "attnlab/analyze.h"
#include "attnlab/bench.h"
#include "attnlab/compare.h"
#include "attnlab/config.h"
#include "attnlab/data.h"
#include "attnlab/distributed.h"
#include "attnlab/error.h"
#include "attnlab/evaluate.h"
#include "attnlab/model.h"
#include "attnlab/printable.h"
#include "attnlab/progress.h"
#include "attnlab/tasks.h"
#include "attnlab/tokenizer.h"
#include "attnlab/trainer.h"
#include "attnlab/version.h"
