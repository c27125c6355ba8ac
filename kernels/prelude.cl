// The shared prelude: prepended to every kernel family (kernels/<family>.cl) when its source is assembled, so
// each family's text as built, shown and checksummed is complete. Macros only: a family that uses none of them
// compiles to the same code as without the prelude.

#ifndef GRID_LOOP
#define GRID_LOOP 0
#endif
// The y and z indices of a 3-D kernel. With GRID_LOOP (set when a launch caps the y or z extent at 65535
// groups, as some drivers require) they stride over the grid; otherwise each work-item has one (y, z), which
// CPU OpenCL compilers vectorise far better than a loop.
#if GRID_LOOP
#define YZ_BEGIN(y, d1, z, d0)                                         \
    for (int z = get_global_id(2); z < (d0); z += get_global_size(2)) \
        for (int y = get_global_id(1); y < (d1); y += get_global_size(1)) {
#else
#define YZ_BEGIN(y, d1, z, d0)         \
    const int z = get_global_id(2);    \
    const int y = get_global_id(1);    \
    if (y < (d1) && z < (d0)) {
#endif
