/* A program outside the sncl tree: 2 ranks as threads of this process (snclCommInitAll),
 * one All-Reduce of a few floats, checked exactly. Exits non-zero on any failure. */
#include <stdio.h>

#include <sncl/sncl.h>

#define NRANKS 2
#define COUNT 16

#define CHECK(call)                                                                   \
  do {                                                                                \
    snclResult_t r_ = (call);                                                         \
    if (r_ != snclSuccess) {                                                          \
      fprintf(stderr, "%s failed: %s (%s)\n", #call, snclGetErrorString(r_),          \
              snclGetLastError(NULL));                                                \
      return 1;                                                                       \
    }                                                                                 \
  } while (0)

int main(void) {
  int version = 0;
  CHECK(snclGetVersion(&version));
  if (version != SNCL_VERSION_CODE) {
    fprintf(stderr, "library version %d, header %d\n", version, SNCL_VERSION_CODE);
    return 1;
  }

  snclComm_t comms[NRANKS] = {NULL, NULL};
  CHECK(snclCommInitAll(comms, NRANKS, NULL));

  /* Integers and quarters: every sum is exact in float. */
  float send[NRANKS][COUNT], recv[NRANKS][COUNT];
  for (int r = 0; r < NRANKS; ++r)
    for (int i = 0; i < COUNT; ++i) send[r][i] = (float)(100 * r + i) + 0.25f, recv[r][i] = -1.0f;

  /* One thread drives both ranks: the group issues their calls together. */
  CHECK(snclGroupStart());
  for (int r = 0; r < NRANKS; ++r)
    CHECK(snclAllReduce(send[r], recv[r], COUNT, snclFloat, snclSum, comms[r], NULL));
  CHECK(snclGroupEnd());

  int bad = 0;
  for (int r = 0; r < NRANKS; ++r)
    for (int i = 0; i < COUNT; ++i) {
      const float want = (float)(100 + 2 * i) + 0.5f;
      if (recv[r][i] != want) {
        if (bad++ < 5) fprintf(stderr, "rank %d [%d]: got %g, want %g\n", r, i, recv[r][i], want);
      }
    }
  for (int r = 0; r < NRANKS; ++r) CHECK(snclCommDestroy(comms[r]));
  if (bad) {
    fprintf(stderr, "%d wrong elements\n", bad);
    return 1;
  }
  printf("sncl %d: all-reduce of %d floats over %d ranks exact\n", version, COUNT, NRANKS);
  return 0;
}
