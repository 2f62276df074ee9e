# pairwall_set_warnings(target): the warning set every pairwall target builds with.
function(pairwall_set_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
                                           -Wcast-align -Wunused -Woverloaded-virtual -Wimplicit-fallthrough)
  if(PAIRWALL_SANITIZE AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # GCC 12 reports -Wmaybe-uninitialized false positives inside libstdc++ under ASan.
    target_compile_options(${target} PRIVATE -Wno-maybe-uninitialized)
  endif()
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    # GCC 12 at -O3 reports -Wrestrict on `"literal" + std::string` inside libstdc++ (GCC bug
    # 105651), a false positive fixed in GCC 13.
    target_compile_options(${target} PRIVATE -Wno-restrict)
  endif()
  if(PAIRWALL_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
