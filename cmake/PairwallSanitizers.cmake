# Address + undefined-behaviour sanitizers for the whole build (preset "asan").
if(PAIRWALL_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
# The thread sanitizer (preset "tsan"), for the queue workers, sync and control threads that share
# the engine. Two things the libraries do under it are undone:
#   - protobuf's headers give MapFieldBase two more fields where __SANITIZE_THREAD__ is defined, and
#     Debian's libprotobuf was built without them: instrumented code and the library would disagree
#     on the layout of every map field (a crash in the first map a reflection walk touches);
#   - GCC's target_clones resolvers run while the loader relocates, before the sanitizer's runtime
#     has started, and crash in its instrumentation: PAIRWALL_NO_CLONES keeps one version.
# GCC warns that the sanitizer does not model the atomic_thread_fence of Boost.Asio's handler calls
# (-Wtsan); a handler posted to another thread goes through its scheduler's mutex, which it models.
if(PAIRWALL_SANITIZE_THREAD)
  if(PAIRWALL_SANITIZE)
    message(FATAL_ERROR "PAIRWALL_SANITIZE_THREAD and PAIRWALL_SANITIZE exclude each other")
  endif()
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer -U__SANITIZE_THREAD__ -DPAIRWALL_NO_CLONES
                      -Wno-tsan)
  add_link_options(-fsanitize=thread)
endif()
if(PAIRWALL_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "PAIRWALL_FUZZ needs clang (use the 'fuzz' preset)")
  endif()
  # A finding of the undefined-behaviour sanitizer stops the run as a crash does: reported and left
  # running, it would pass the fuzzing step.
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
