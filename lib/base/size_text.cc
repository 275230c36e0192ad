#include "lib/base/size_text.h"

#include <cctype>
#include <cstdio>

namespace sncl {

bool parseSize(std::string_view text, uint64_t* bytes) {
  size_t i = 0;
  const auto digit = [&](size_t k) { return k < text.size() && std::isdigit(static_cast<unsigned char>(text[k])); };
  if (!digit(0)) return false;  // no sign, no leading point, no hex
  // Exact integer part; the fraction is kept as digits so "1.5K" stays exact.
  uint64_t whole = 0;
  for (; digit(i); ++i) {
    const uint64_t d = uint64_t(text[i] - '0');
    if (whole > (UINT64_MAX - d) / 10) return false;
    whole = whole * 10 + d;
  }
  uint64_t fracNum = 0, fracDen = 1;
  if (i < text.size() && text[i] == '.') {
    ++i;
    if (!digit(i)) return false;
    for (; digit(i); ++i) {
      if (fracDen > UINT64_MAX / 100) return false;  // 18 fraction digits are plenty
      fracNum = fracNum * 10 + uint64_t(text[i] - '0');
      fracDen *= 10;
    }
  }
  int shift = 0;
  if (i < text.size()) {
    switch (text[i]) {
      case 'k': case 'K': shift = 10; break;
      case 'm': case 'M': shift = 20; break;
      case 'g': case 'G': shift = 30; break;
      case 't': case 'T': shift = 40; break;
      default: break;
    }
    if (shift) ++i;
  }
  std::string_view unit = text.substr(i);
  if (!(unit.empty() || unit == "B" || unit == "b" || (shift && (unit == "iB" || unit == "ib")))) return false;
  const uint64_t mult = uint64_t(1) << shift;
  if (whole > UINT64_MAX / mult) return false;
  // fracNum * mult / fracDen must be whole: fracNum < fracDen <= 1e18 and mult <= 2^40 could
  // overflow 64 bits, so reduce by the common factors of 2 first.
  uint64_t num = fracNum, den = fracDen, m = mult;
  while (m > 1 && den % 2 == 0) m /= 2, den /= 2;
  if (num % den) return false;  // not a whole number of bytes
  num /= den;
  if (num && m > UINT64_MAX / num) return false;
  const uint64_t frac = num * m, base = whole * mult;
  if (frac > UINT64_MAX - base) return false;
  *bytes = base + frac;
  return true;
}

std::string sizeText(uint64_t bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double v = double(bytes);
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  char buf[32];
  if (u == 0 || v == double(uint64_t(v))) snprintf(buf, sizeof(buf), "%llu %s", (unsigned long long)v, units[u]);
  else snprintf(buf, sizeof(buf), "%.1f %s", v, units[u]);
  return buf;
}

}  // namespace sncl
