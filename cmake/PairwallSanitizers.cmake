# Address + undefined-behaviour sanitizers for the whole build (preset "asan").
if(PAIRWALL_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
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
