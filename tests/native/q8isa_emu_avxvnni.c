/* Tests only: the AVX-VNNI path's code, its instructions emulated (q8isa_emu.h), in slot XI_EMU_SLOT_AVXVNNI (a -D of the test build). */
#define XI_EMU_CALLS xi_emu_calls_avxvnni
#include "q8isa_emu.h"
#define XI_ISA XI_ISA_AVXVNNI
#include "q8dot_tiles.h"
#include "q8kdot_tiles.h"
XI_Q8_REGISTER(XI_EMU_SLOT_AVXVNNI)
