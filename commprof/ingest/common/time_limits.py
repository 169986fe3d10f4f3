"""The range of times commprof accepts, apart from :mod:`exact_time` so that code which must not import numpy
(the pass in kineto.prefetch's child) can check it."""

# |ns| of a time or duration that commprof accepts (~73 years): sums of a base, a start and a duration
# stay inside int64, so no figure can wrap around
MAX_NS = 2**61 - 1
MAX_US = MAX_NS // 1000 - 1  # the largest whole µs whose ns (with any fraction) is within MAX_NS
