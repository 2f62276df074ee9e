# pairwall_set_warnings(target): the warning set every pairwall target builds with.
function(pairwall_set_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
                                           -Wcast-align -Wunused -Woverloaded-virtual -Wimplicit-fallthrough)
  if(PAIRWALL_SANITIZE AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # GCC 12 reports -Wmaybe-uninitialized false positives inside libstdc++ under ASan.
    target_compile_options(${target} PRIVATE -Wno-maybe-uninitialized)
  endif()
  if(PAIRWALL_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
