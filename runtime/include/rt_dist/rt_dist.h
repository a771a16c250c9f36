// Umbrella header of librt_dist.
#pragma once

#include "rt_dist/checkpoint.h"
#include "rt_dist/communicator.h"
#include "rt_dist/context.h"
#include "rt_dist/data.h"
#include "rt_dist/ddp.h"
#include "rt_dist/error.h"
#include "rt_dist/fsdp.h"
#include "rt_dist/recovery.h"
#include "rt_dist/store.h"
#include "rt_dist/trace.h"
#include "rt_dist/types.h"
#include "rt_dist/work.h"
