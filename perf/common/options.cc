#include "perf/common/options.h"

#include <getopt.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "perf/common/args.h"
#include "sncl/sncl_ext.h"

namespace perf {

const char* const kTypeNames[snclNumTypes] = {"int8",  "uint8", "int32",  "uint32",   "int64",  "uint64",
                                              "half",  "float", "double", "bfloat16", "f8e4m3", "f8e5m2"};
// Indexed by op; mulsum last (kMulSum).
const char* const kOpNames[kNumOps] = {"sum", "prod", "max", "min", "avg", "band",
                                       "bor", "bxor", "land", "lor", "lxor", "mulsum"};

const char* peerName(Peer p) { return p == Peer::Mpi ? "mpi" : "gloo"; }

namespace {

void usage(const char* prog) {
  fprintf(stderr,
          "usage: %s [-b minbytes] [-e maxbytes] [-f factor] [-n iters] [-w warmup] [-c check 0/1]\n"
          "          [-t threads per process] [-d type|all] [-o op|all] [-r root] [-a 0-3] [-R 0/1]\n"
          "          [--baseline mpi|gloo|mpi,gloo|none] [--ceiling] [-J results.json] [--version]\n"
          "  defaults: -b 8 -e 64M -f 2 -n 20 -w 5 -c 1 -t 1 -d float -o sum -r 0 -a 1 -R 0 --baseline mpi\n"
          "  -b, -e: nccl-tests' size (the whole buffer), e.g. 8, 64K, 1.5M, 1G (powers of 1024)\n"
          "  -a: time across ranks 0 = rank 0's, 1 = mean (default), 2 = min, 3 = max\n"
          "  -R: sncl's buffers from 0 = the heap (default, as nccl-tests), 1 = snclMemAlloc; the peers' always from the heap\n"
          "  --baseline: peers run on the same buffers right after sncl, per size (default mpi;\n"
          "              peers need one rank per process, -t 1)\n"
          "  --ceiling: memcpy and a[i]+=b[i] bandwidth with every rank at once, and sncl's share of it\n"
          "types: int8 uint8 int32 uint32 int64 uint64 half float double bfloat16 f8e4m3 f8e5m2 | all\n"
          "       (NCCL's names work too: float16, float32, float64, float8e4m3, ...)\n"
          "ops: sum prod max min avg mulsum band bor bxor land lor lxor | all\n"
          "     (the bitwise and logical ops run on the integer types only)\n",
          prog);
}

bool parseInt(const char* s, int lo, int hi, int* out) {
  char* end = nullptr;
  long v = strtol(s, &end, 0);
  if (end == s || *end || v < lo || v > hi) return false;
  *out = static_cast<int>(v);
  return true;
}

// "all" or one name of names[0..n).
template <class E>
bool parseList(const char* arg, const char* const* names, int n, std::vector<E>* out) {
  out->clear();
  for (int i = 0; i < n; ++i)
    if (!strcmp(arg, "all") || !strcmp(arg, names[i])) out->push_back(static_cast<E>(i));
  return !out->empty();
}

// "all" or any name the library reads as a datatype.
bool parseTypes(const char* arg, std::vector<snclDataType_t>* out) {
  if (!strcmp(arg, "all")) return parseList(arg, kTypeNames, snclNumTypes, out);
  out->assign(1, snclFloat32);
  return snclDataTypeFromName(arg, &out->front()) == snclSuccess;
}

bool parseSize(const char* arg, size_t* out) { return snclParseSize(arg, out) == snclSuccess; }

bool parsePeers(const char* arg, std::vector<Peer>* out) {
  out->clear();
  if (!strcmp(arg, "none")) return true;
  for (const std::string& name : splitList(arg)) {
    if (name == "mpi") out->push_back(Peer::Mpi);
    else if (name == "gloo") out->push_back(Peer::Gloo);
    else return false;
  }
  return !out->empty();
}

}  // namespace

bool parseOptions(int argc, char** argv, Options* o, bool* help) {
  *help = false;
  enum { kBaseline = 1000, kCeiling, kVersion };
  static const option longOptions[] = {{"baseline", required_argument, nullptr, kBaseline},
                                       {"ceiling", no_argument, nullptr, kCeiling},
                                       {"version", no_argument, nullptr, kVersion},
                                       {"help", no_argument, nullptr, 'h'},
                                       {nullptr, 0, nullptr, 0}};
  int ch, stepFactor = 2, minIters = 1;
  bool ok = true;
  while (ok && (ch = getopt_long(argc, argv, "b:e:f:n:w:c:t:d:o:r:a:J:B:R:h", longOptions, nullptr)) != -1) {
    switch (ch) {
      case 'b': ok = parseSize(optarg, &o->minBytes); break;
      case 'e': ok = parseSize(optarg, &o->maxBytes); break;
      case 'f': ok = parseInt(optarg, 2, 1 << 20, &stepFactor); o->stepFactor = static_cast<size_t>(stepFactor); break;
      case 'n': ok = parseInt(optarg, minIters, 1 << 24, &o->iters); break;
      case 'w': ok = parseInt(optarg, 0, 1 << 24, &o->warmup); break;
      case 'c': ok = parseInt(optarg, 0, 1, &o->check); break;
      case 't': ok = parseInt(optarg, 1, 256, &o->threads); break;
      case 'r': ok = parseInt(optarg, 0, 1 << 30, &o->root); break;
      case 'a': ok = parseInt(optarg, 0, 3, &o->average); break;
      case 'J': o->jsonPath = optarg; break;
      case 'R': {
        int on = 0;
        ok = parseInt(optarg, 0, 1, &on);
        o->sharedBuffers = on != 0;
        break;
      }
      case 'B': {  // the older spelling: -B 0 is --baseline none
        int on = 1;
        ok = parseInt(optarg, 0, 1, &on);
        if (!on) o->peers.clear();
        break;
      }
      case kBaseline: ok = parsePeers(optarg, &o->peers); break;
      case kCeiling: o->ceiling = true; break;
      case 'd': ok = parseTypes(optarg, &o->types); break;
      case 'o': ok = parseList(optarg, kOpNames, kNumOps, &o->ops); break;
      case 'h': *help = true; usage(argv[0]); return false;
      case kVersion: {
        const char* slash = strrchr(argv[0], '/');
        printf("%s %s\n", slash ? slash + 1 : argv[0], snclGetBuildVersion());
        *help = true;
        return false;
      }
      default: ok = false; break;
    }
    if (!ok && ch != '?') fprintf(stderr, "%s: bad value '%s' for -%c\n", argv[0], optarg ? optarg : "", ch < 128 ? ch : '-');
  }
  if (ok && optind < argc) {
    fprintf(stderr, "%s: unexpected argument '%s'\n", argv[0], argv[optind]);
    ok = false;
  }
  if (ok && o->minBytes > o->maxBytes) {
    fprintf(stderr, "%s: -b %zu is larger than -e %zu\n", argv[0], o->minBytes, o->maxBytes);
    ok = false;
  }
  if (!ok) usage(argv[0]);
  return ok;
}

}  // namespace perf
