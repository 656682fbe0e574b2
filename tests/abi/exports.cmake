# What a program linking libropepool sees (ctest test library_exports_the_header_api): the shared
# library exports exactly the functions the header declares RP_API, and every global symbol of the
# static library carries the rp_ prefix, so nothing collides with an engine's own names.
# cmake -DNM=... -DHEADER=... -DSHARED=... -DSTATIC=... -P exports.cmake
file(STRINGS ${HEADER} declarations REGEX "^RP_API ")
set(declared "")
foreach(line ${declarations})
  string(REGEX MATCH "([a-z0-9_]+)\\(" name "${line}")
  list(APPEND declared ${CMAKE_MATCH_1})
endforeach()
list(SORT declared)

execute_process(COMMAND ${NM} -D --defined-only ${SHARED} OUTPUT_VARIABLE out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NM} -D failed on ${SHARED}")
endif()
string(REGEX MATCHALL "[^\n]+" lines "${out}")
set(exported "")
foreach(line ${lines})
  string(REGEX REPLACE ".* " "" symbol "${line}")
  list(APPEND exported ${symbol})
endforeach()
list(SORT exported)
if(NOT exported STREQUAL declared)
  message(FATAL_ERROR "libropepool.so exports\n  ${exported}\nbut the header declares\n  ${declared}")
endif()

execute_process(COMMAND ${NM} -g --defined-only ${STATIC} OUTPUT_VARIABLE out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NM} -g failed on ${STATIC}")
endif()
string(REGEX MATCHALL "[^\n]+" lines "${out}")
foreach(line ${lines})
  # "address type name" lines; C++ (CUDA) names are mangled around the prefix; the C++ runtime's
  # personality reference is not ours
  if(line MATCHES "^[0-9a-f]+ [A-Za-z] (.*)$")
    set(symbol "${CMAKE_MATCH_1}")
    if(NOT symbol MATCHES "rp_" AND NOT symbol STREQUAL "DW.ref.__gxx_personality_v0")
      message(FATAL_ERROR "libropepool.a defines the global ${symbol} without the rp_ prefix")
    endif()
  endif()
endforeach()
message(STATUS "${SHARED}: ${exported}; ${STATIC}: every global prefixed")
