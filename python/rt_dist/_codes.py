"""The numbers rt_dist/c_api.h gives dtypes, reductions and group operations.
Apart from _capi.py so that they can be read without loading librt_dist."""

FLOAT32, FLOAT64, INT32, INT64, BFLOAT16, FLOAT16 = range(6)
SUM, AVG, MIN, MAX = range(4)
OP_ALL_REDUCE, OP_BROADCAST, OP_ALL_GATHER, OP_REDUCE_SCATTER, OP_SEND, OP_RECV = range(6)
