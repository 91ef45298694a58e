// Omega's device printf: the function every `printf` in a kernel calls (nvcc compiles `printf(fmt, ...)`
// to `vprintf(fmt, args)`, where `args` is the generic address of a local buffer holding the arguments,
// each at its natural alignment: ints and chars as 4 bytes, doubles (floats are promoted), pointers and
// 64-bit integers as 8 bytes). The loader points a module's undefined `vprintf` at `omega_vprintf`.
//
// Built relocatable (`nvcc -cubin -rdc=true`): `omega_printf_buffer` is left undefined and resolved by
// the loader to the session's printf buffer, through the 32-bit halves in the MOV instructions that load
// its address. The function reads no constant bank of its own: it runs with the calling kernel's banks
// (it reads only c[0x0][0x208], the global-memory descriptor every kernel's bank 0 carries).
//
// The calling convention. ptxas calls `vprintf` as a "syscall": arguments in R4:R5 (format) and R6:R7
// (argument block), return address in R20:R21 (LEPC), `CALL.ABS.NOINC` through the address in constant
// bank 4, and — unlike an ordinary call — it keeps its own values in R2, R16-R19, R22 and up (R95 and
// more in a kernel of high register pressure), UR36 and up and B6 live across the call, treating only
// R0, R3-R15, the predicates and B0-B5 as clobbered (read from the SASS of printf kernels with nvdisasm:
// docs/kernels.md, "Device printf"). An ordinary ABI function saves R2, R16-R31 and B6 when it uses
// them but may clobber R32 and up; so this library is built with -maxrregcount=32 (build.rs): it never
// touches R32 and up, and ptxas saves and restores the callee-saved registers it does use on its own
// stack frame, which the loader adds to the calling kernel's stack. Its REGCOUNT (at most 32) is checked
// by hal/tests/cubin.rs.
//
// The buffer (src/printf.rs reads it; keep the two in step):
//
//   offset 0   u64 cursor     bytes of the record area reserved so far (may pass the capacity)
//   offset 8   u64 capacity   bytes of the record area
//   offset 16  u32 dropped    records that did not fit
//   offset 20  u32 magic      0x4f505246 ("FRPO")
//   offset 32  records, back to back in reservation order (so each thread's are in program order)
//
// A record: u32 bytes (the whole record, a multiple of 8), u32 argument bytes, u64 format address, the
// argument block (padded to 4), then for each %s argument a u32 length (bit 31: cut at
// OMEGA_PRINTF_MAX_STRING bytes; bit 30: a null pointer) and the string's bytes padded to 4. The one
// record that straddles the capacity writes a zero `bytes` word where it would have started, so the host
// knows where the records end.

#define OMEGA_PRINTF_MAGIC 0x4f505246u
#define OMEGA_PRINTF_MAX_STRING 1024u
#define OMEGA_PRINTF_STRING_CUT (1u << 31)
#define OMEGA_PRINTF_STRING_NULL (1u << 30)

struct OmegaPrintfBuffer {
  unsigned long long cursor;
  unsigned long long capacity;
  unsigned int dropped;
  unsigned int magic;
  unsigned long long reserved;
  unsigned char records[1];
};

extern __device__ OmegaPrintfBuffer omega_printf_buffer;

namespace {

__device__ __forceinline__ unsigned align_up(unsigned x, unsigned a) { return (x + a - 1) & ~(a - 1); }

__device__ __forceinline__ bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Bytes of string `s` to copy for a %s with precision `precision` (negative: none), and its flags.
__device__ __forceinline__ unsigned string_length(const char* s, int precision, unsigned* flags) {
  if (s == nullptr) {
    *flags = OMEGA_PRINTF_STRING_NULL;
    return 0;
  }
  unsigned limit = OMEGA_PRINTF_MAX_STRING;
  bool by_precision = precision >= 0 && (unsigned)precision <= limit;
  if (by_precision) limit = (unsigned)precision;
  unsigned n = 0;
  while (n < limit && s[n] != 0) ++n;
  *flags = (n == limit && !by_precision && s[n] != 0) ? OMEGA_PRINTF_STRING_CUT : 0u;
  return n;
}

// Walks `fmt` as the host formatter does (src/printf.rs, `walk`): for every argument a conversion takes,
// calls on_arg(offset, size); for every %s, on_string(pointer, precision). Returns the end of the
// argument block. A conversion it does not know takes no argument.
template <typename OnArg, typename OnString>
__device__ __forceinline__ unsigned walk(const char* fmt, const char* args, OnArg on_arg, OnString on_string) {
  unsigned offset = 0;
  const char* p = fmt;
  while (*p != 0) {
    if (*p++ != '%') continue;
    if (*p == '%') {
      ++p;
      continue;
    }
    while (*p == '-' || *p == '+' || *p == ' ' || *p == '#' || *p == '0' || *p == '\'') ++p;
    if (*p == '*') {
      offset = align_up(offset, 4);
      on_arg(offset, 4u);
      offset += 4;
      ++p;
    } else {
      while (is_digit(*p)) ++p;
    }
    int precision = -1;
    if (*p == '.') {
      ++p;
      if (*p == '*') {
        offset = align_up(offset, 4);
        on_arg(offset, 4u);
        precision = *(const int*)(args + offset);
        offset += 4;
        ++p;
      } else {
        precision = 0;
        while (is_digit(*p)) precision = precision * 10 + (*p++ - '0');
      }
    }
    bool wide = false;
    for (;;) {
      char c = *p;
      if (c == 'h') {
        ++p;
      } else if (c == 'l' || c == 'j' || c == 'z' || c == 't' || c == 'L' || c == 'q') {
        wide = true;
        ++p;
      } else {
        break;
      }
    }
    char c = *p;
    if (c == 0) break;
    ++p;
    unsigned size;
    switch (c) {
      case 'd': case 'i': case 'u': case 'o': case 'x': case 'X':
        size = wide ? 8u : 4u;
        break;
      case 'c':
        size = 4u;
        break;
      case 'f': case 'F': case 'e': case 'E': case 'g': case 'G': case 'a': case 'A':
      case 's': case 'p': case 'n':
        size = 8u;
        break;
      default:
        continue;
    }
    offset = align_up(offset, size);
    on_arg(offset, size);
    if (c == 's') on_string(*(const char* const*)(args + offset), precision);
    offset += size;
  }
  return offset;
}

}  // namespace

extern "C" __device__ int omega_vprintf(const char* fmt, const char* args) {
  int count = 0;
  unsigned strings = 0;
  unsigned arg_bytes = walk(
      fmt, args, [&](unsigned, unsigned) { ++count; },
      [&](const char* s, int precision) {
        unsigned flags;
        strings += 4 + align_up(string_length(s, precision, &flags), 4);
      });
  unsigned long long bytes = align_up(16 + align_up(arg_bytes, 4) + strings, 8);
  OmegaPrintfBuffer* b = &omega_printf_buffer;
  unsigned long long at = atomicAdd(&b->cursor, bytes);
  unsigned long long capacity = b->capacity;
  if (at + bytes > capacity) {
    atomicAdd(&b->dropped, 1u);
    if (at + 4 <= capacity) *(unsigned*)(b->records + at) = 0;
    return -1;
  }
  unsigned char* r = b->records + at;
  *(unsigned*)r = (unsigned)bytes;
  *(unsigned*)(r + 4) = arg_bytes;
  *(const char**)(r + 8) = fmt;
  for (unsigned i = 0; i < arg_bytes; i += 4) *(unsigned*)(r + 16 + i) = *(const unsigned*)(args + i);
  unsigned char* out = r + 16 + align_up(arg_bytes, 4);
  walk(
      fmt, args, [](unsigned, unsigned) {},
      [&](const char* s, int precision) {
        unsigned flags;
        unsigned n = string_length(s, precision, &flags);
        *(unsigned*)out = n | flags;
        for (unsigned i = 0; i < n; ++i) out[4 + i] = (unsigned char)s[i];
        out += 4 + align_up(n, 4);
      });
  return count;
}
