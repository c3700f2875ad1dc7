/* stream_plan.h - builds the CUDA backend's stream plan (its data: plan/streams.h,
 * which the runtime includes; docs/cuda.md "The stream plan"). */
#ifndef PIPEC_STREAM_PLAN_H
#define PIPEC_STREAM_PLAN_H

#include "streams.h"

/* Builds the plan: per op its stream and the ops whose end it waits for, by the rules
 * of plan/streams.h. Ops with a kind, virtual stage or micro-batch out of range get
 * only the same-stream order. Returns NULL when out of memory. Linear in ops + waits. */
StreamPlan *stream_plan(const StreamIn *in);

/* The name of a stream in streams.json: "compute", "d2h", "h2d"; "?" out of range. */
const char *stream_name(unsigned s);

#endif
