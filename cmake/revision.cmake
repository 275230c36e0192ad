# Run at every build (cmake -P): writes OUT with the source tree's git revision and the
# version, rewriting it only when it changed, so a build after a commit recompiles one file.
execute_process(COMMAND git -C "${SRC}" describe --always --dirty --abbrev=7
  OUTPUT_VARIABLE rev OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR rev STREQUAL "")
  set(rev unknown)  # built from an export without git history
endif()
set(text "#define SNCL_GIT_REVISION \"${rev}\"\n#define SNCL_VERSION_TEXT \"${VERSION}\"\n")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
