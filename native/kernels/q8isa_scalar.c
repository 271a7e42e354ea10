/* The portable C path of the int8 dot products (xi_q8.h): always built, runs on any cpu. */
#include "xi_q8.h"
#define XI_ISA XI_ISA_SCALAR
#include "q8dot_tiles.h"
#include "q8kdot_tiles.h"
XI_Q8_REGISTER(XI_ISA_SCALAR)
