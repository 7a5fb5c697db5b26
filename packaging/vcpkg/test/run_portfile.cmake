# Runs packaging/vcpkg/ports/llmkv/portfile.cmake outside vcpkg (which cannot be downloaded on
# the machines this project is built on), with the vcpkg helper functions it calls replaced by
# stand-ins that do what vcpkg's documentation says each one does, for one release build of
# the x64-linux triplet, or of x64-mingw-dynamic cross-built from Linux:
#   cmake -DSOURCE_DIR=... -DPORT_DIR=... -DWORK_DIR=... -DFEATURES="tools" [-DJOBS=2]
#         [-DTARGET_TRIPLET=x64-mingw-dynamic -DMIMALLOC_SOURCE_DIR=...]
#         [-DEXTRA_CONFIGURE_ARGS="-DCMAKE_CXX_COMPILER_LAUNCHER=ccache;..."] -P run_portfile.cmake
# Result: WORK_DIR/packages/llmkv_TRIPLET, the tree vcpkg would install.
# scripts/check_vcpkg_port.sh drives it and checks the result; the port's README.md says what
# this does not test.
cmake_minimum_required(VERSION 3.22)
foreach(v SOURCE_DIR PORT_DIR WORK_DIR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "run_portfile.cmake: -D${v}=... is required")
  endif()
endforeach()
if(NOT DEFINED JOBS)
  set(JOBS 2)
endif()

# ---- what vcpkg defines for a port ------------------------------------------------------
file(READ "${PORT_DIR}/vcpkg.json" _manifest)
string(JSON PORT GET "${_manifest}" name)
string(JSON VERSION GET "${_manifest}" version)
if(NOT DEFINED TARGET_TRIPLET)
  set(TARGET_TRIPLET x64-linux)
endif()
set(VCPKG_HOST_EXECUTABLE_SUFFIX "")
if(TARGET_TRIPLET STREQUAL "x64-linux")
  set(VCPKG_TARGET_IS_LINUX ON)
  set(VCPKG_LIBRARY_LINKAGE static)   # x64-linux's default
  set(VCPKG_TARGET_EXECUTABLE_SUFFIX "")
  set(VCPKG_TARGET_SHARED_LIBRARY_SUFFIX ".so")
elseif(TARGET_TRIPLET STREQUAL "x64-mingw-dynamic")
  # Cross-built from Linux, as vcpkg's MinGW community triplets allow: EXTRA_CONFIGURE_ARGS
  # carries the toolchain file and the staged dependencies standing in for vcpkg's ports.
  set(VCPKG_TARGET_IS_WINDOWS ON)
  set(VCPKG_TARGET_IS_MINGW ON)
  set(VCPKG_LIBRARY_LINKAGE dynamic)
  set(VCPKG_TARGET_EXECUTABLE_SUFFIX ".exe")
  set(VCPKG_TARGET_SHARED_LIBRARY_SUFFIX ".dll")
  if(NOT DEFINED MIMALLOC_SOURCE_DIR)
    message(FATAL_ERROR "run_portfile.cmake: x64-mingw-dynamic needs -DMIMALLOC_SOURCE_DIR=... "
      "(the mimalloc source vcpkg_from_github would download)")
  endif()
else()
  message(FATAL_ERROR "run_portfile.cmake: TARGET_TRIPLET x64-linux or x64-mingw-dynamic")
endif()
set(CURRENT_PACKAGES_DIR "${WORK_DIR}/packages/${PORT}_${TARGET_TRIPLET}")
set(CURRENT_INSTALLED_DIR "${WORK_DIR}/installed/${TARGET_TRIPLET}")
set(CURRENT_HOST_INSTALLED_DIR "${WORK_DIR}/installed/x64-linux-host")
set(CURRENT_BUILDTREES_DIR "${WORK_DIR}/buildtrees/${PORT}")
string(REPLACE " " ";" FEATURES "${FEATURES}")
list(PREPEND FEATURES core)
file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}")
# The host dependency flatbuffers provides tools/flatbuffers/flatc: the system's stands in.
find_program(_flatc flatc REQUIRED)
file(MAKE_DIRECTORY "${CURRENT_HOST_INSTALLED_DIR}/tools/flatbuffers")
file(CREATE_LINK "${_flatc}" "${CURRENT_HOST_INSTALLED_DIR}/tools/flatbuffers/flatc" SYMBOLIC)

function(_mock_log)
  string(JOIN " " _m ${ARGN})
  message(STATUS "[vcpkg stand-in] ${_m}")
endfunction()

# ---- the helpers the portfile calls -------------------------------------------------------
function(vcpkg_from_github)
  cmake_parse_arguments(PARSE_ARGV 0 a "" "OUT_SOURCE_PATH;REPO;REF;SHA512;HEAD_REF" "PATCHES")
  foreach(k OUT_SOURCE_PATH REPO REF SHA512)
    if(NOT DEFINED a_${k})
      message(FATAL_ERROR "vcpkg_from_github: ${k} missing")
    endif()
  endforeach()
  if(a_REPO STREQUAL "microsoft/mimalloc")
    _mock_log("vcpkg_from_github ${a_REPO}@${a_REF}: using ${MIMALLOC_SOURCE_DIR}")
    set(${a_OUT_SOURCE_PATH} "${MIMALLOC_SOURCE_DIR}" PARENT_SCOPE)
    return()
  endif()
  _mock_log("vcpkg_from_github ${a_REPO}@${a_REF}: using the local tree ${SOURCE_DIR}")
  set(${a_OUT_SOURCE_PATH} "${SOURCE_DIR}" PARENT_SCOPE)
endfunction()

function(vcpkg_check_features)
  cmake_parse_arguments(PARSE_ARGV 0 a "" "OUT_FEATURE_OPTIONS;PREFIX" "FEATURES;INVERTED_FEATURES")
  set(out "")
  list(LENGTH a_FEATURES n)
  math(EXPR last "${n} - 1")
  foreach(i RANGE 0 ${last} 2)
    math(EXPR j "${i} + 1")
    list(GET a_FEATURES ${i} feature)
    list(GET a_FEATURES ${j} option)
    if(feature IN_LIST FEATURES)
      list(APPEND out "-D${option}=ON")
    else()
      list(APPEND out "-D${option}=OFF")
    endif()
  endforeach()
  _mock_log("vcpkg_check_features: ${out}")
  set(${a_OUT_FEATURE_OPTIONS} "${out}" PARENT_SCOPE)
endfunction()

function(vcpkg_cmake_configure)
  cmake_parse_arguments(PARSE_ARGV 0 a "" "SOURCE_PATH"
    "OPTIONS;OPTIONS_RELEASE;OPTIONS_DEBUG;MAYBE_UNUSED_VARIABLES")
  set(build "${CURRENT_BUILDTREES_DIR}/${TARGET_TRIPLET}-rel")
  set(gen "")
  find_program(_ninja ninja)
  if(_ninja)
    set(gen -G Ninja)
  endif()
  # The options vcpkg_cmake_configure passes to every port (release half).
  set(cmd "${CMAKE_COMMAND}" -S "${a_SOURCE_PATH}" -B "${build}" ${gen}
    -DCMAKE_BUILD_TYPE=Release
    "-DCMAKE_INSTALL_PREFIX=${CURRENT_PACKAGES_DIR}"
    -DCMAKE_INSTALL_LIBDIR:STRING=lib
    -DCMAKE_INSTALL_BINDIR:STRING=bin
    -DBUILD_SHARED_LIBS=OFF
    -DFETCHCONTENT_FULLY_DISCONNECTED=ON
    -DCMAKE_EXPORT_NO_PACKAGE_REGISTRY=ON
    -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON
    ${a_OPTIONS} ${a_OPTIONS_RELEASE} ${EXTRA_CONFIGURE_ARGS})
  _mock_log("vcpkg_cmake_configure: ${cmd}")
  execute_process(COMMAND ${cmd} RESULT_VARIABLE rc OUTPUT_FILE "${WORK_DIR}/configure.log" ERROR_FILE "${WORK_DIR}/configure.err")
  if(NOT rc EQUAL 0)
    file(READ "${WORK_DIR}/configure.err" err)
    message(FATAL_ERROR "configure failed (${WORK_DIR}/configure.log):\n${err}")
  endif()
  set_property(GLOBAL PROPERTY _mock_build_dir "${build}")
endfunction()

function(vcpkg_cmake_install)
  get_property(build GLOBAL PROPERTY _mock_build_dir)
  _mock_log("vcpkg_cmake_install: build and install ${build}")
  execute_process(COMMAND "${CMAKE_COMMAND}" --build "${build}" --target install -j ${JOBS}
    RESULT_VARIABLE rc OUTPUT_FILE "${WORK_DIR}/build.log" ERROR_FILE "${WORK_DIR}/build.err")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "build failed: see ${WORK_DIR}/build.log")
  endif()
endfunction()

# Moves CONFIG_PATH to share/PACKAGE_NAME and rewrites the relative paths the moved files
# compute their prefix with (CMake's generated targets file and configure_package_config_file).
function(vcpkg_cmake_config_fixup)
  cmake_parse_arguments(PARSE_ARGV 0 a "NO_PREFIX_CORRECTION" "PACKAGE_NAME;CONFIG_PATH" "")
  if(NOT a_PACKAGE_NAME)
    set(a_PACKAGE_NAME "${PORT}")
  endif()
  set(from "${CURRENT_PACKAGES_DIR}/${a_CONFIG_PATH}")
  set(to "${CURRENT_PACKAGES_DIR}/share/${a_PACKAGE_NAME}")
  if(NOT IS_DIRECTORY "${from}")
    message(FATAL_ERROR "vcpkg_cmake_config_fixup: '${from}' does not exist")
  endif()
  _mock_log("vcpkg_cmake_config_fixup: ${a_CONFIG_PATH} -> share/${a_PACKAGE_NAME}")
  file(MAKE_DIRECTORY "${to}")
  file(GLOB files "${from}/*")
  foreach(f IN LISTS files)
    get_filename_component(n "${f}" NAME)
    file(RENAME "${f}" "${to}/${n}")
  endforeach()
  file(REMOVE_RECURSE "${from}")
  get_filename_component(parent "${from}" DIRECTORY)
  file(GLOB rest "${parent}/*")
  if(NOT rest)
    file(REMOVE_RECURSE "${parent}")
  endif()
  file(GLOB cmake_files "${to}/*.cmake")
  foreach(f IN LISTS cmake_files)
    file(READ "${f}" text)
    # _IMPORT_PREFIX: one PATH step per folder between the file and the prefix (share/NAME: 2).
    string(REGEX REPLACE
      "get_filename_component\\(_IMPORT_PREFIX \"\\\${CMAKE_CURRENT_LIST_FILE}\" PATH\\)(\nget_filename_component\\(_IMPORT_PREFIX \"\\\${_IMPORT_PREFIX}\" PATH\\))*"
      "get_filename_component(_IMPORT_PREFIX \"\${CMAKE_CURRENT_LIST_FILE}\" PATH)\nget_filename_component(_IMPORT_PREFIX \"\${_IMPORT_PREFIX}\" PATH)\nget_filename_component(_IMPORT_PREFIX \"\${_IMPORT_PREFIX}\" PATH)"
      text "${text}")
    string(REGEX REPLACE "get_filename_component\\(PACKAGE_PREFIX_DIR \"\\\${CMAKE_CURRENT_LIST_DIR}/[./]*\" ABSOLUTE\\)"
      "get_filename_component(PACKAGE_PREFIX_DIR \"\${CMAKE_CURRENT_LIST_DIR}/../../\" ABSOLUTE)" text "${text}")
    file(WRITE "${f}" "${text}")
  endforeach()
endfunction()

# Makes every .pc file relocatable: prefix=${pcfiledir}/../.. and no absolute staging path.
function(vcpkg_fixup_pkgconfig)
  file(GLOB pcs "${CURRENT_PACKAGES_DIR}/lib/pkgconfig/*.pc" "${CURRENT_PACKAGES_DIR}/share/pkgconfig/*.pc")
  foreach(pc IN LISTS pcs)
    _mock_log("vcpkg_fixup_pkgconfig: ${pc}")
    file(READ "${pc}" text)
    string(REPLACE "${CURRENT_PACKAGES_DIR}" "\${prefix}" text "${text}")
    string(REGEX REPLACE "(^|\n)prefix=[^\n]*" "\\1prefix=\${pcfiledir}/../.." text "${text}")
    file(WRITE "${pc}" "${text}")
  endforeach()
endfunction()

function(vcpkg_copy_tools)
  cmake_parse_arguments(PARSE_ARGV 0 a "AUTO_CLEAN" "SEARCH_DIR;DESTINATION" "TOOL_NAMES")
  if(NOT a_SEARCH_DIR)
    set(a_SEARCH_DIR "${CURRENT_PACKAGES_DIR}/bin")
  endif()
  if(NOT a_DESTINATION)
    set(a_DESTINATION "${CURRENT_PACKAGES_DIR}/tools/${PORT}")
  endif()
  file(MAKE_DIRECTORY "${a_DESTINATION}")
  foreach(t IN LISTS a_TOOL_NAMES)
    if(NOT EXISTS "${a_SEARCH_DIR}/${t}${VCPKG_TARGET_EXECUTABLE_SUFFIX}")
      message(FATAL_ERROR "vcpkg_copy_tools: ${t} not found in ${a_SEARCH_DIR}")
    endif()
    _mock_log("vcpkg_copy_tools: ${t} -> tools/${PORT}")
    file(RENAME "${a_SEARCH_DIR}/${t}${VCPKG_TARGET_EXECUTABLE_SUFFIX}" "${a_DESTINATION}/${t}${VCPKG_TARGET_EXECUTABLE_SUFFIX}")
  endforeach()
  if(a_AUTO_CLEAN)
    file(GLOB rest "${CURRENT_PACKAGES_DIR}/bin/*")
    if(NOT rest)
      file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}/bin")
    endif()
  endif()
endfunction()

function(vcpkg_install_copyright)
  cmake_parse_arguments(PARSE_ARGV 0 a "" "COMMENT" "FILE_LIST")
  set(text "")
  foreach(f IN LISTS a_FILE_LIST)
    if(NOT EXISTS "${f}")
      message(FATAL_ERROR "vcpkg_install_copyright: ${f} does not exist")
    endif()
    file(READ "${f}" t)
    string(APPEND text "${t}")
  endforeach()
  file(WRITE "${CURRENT_PACKAGES_DIR}/share/${PORT}/copyright" "${text}")
endfunction()

# ---- the port itself ----------------------------------------------------------------------
_mock_log("port ${PORT} ${VERSION}, features: ${FEATURES}")
include("${PORT_DIR}/portfile.cmake")
_mock_log("done: ${CURRENT_PACKAGES_DIR}")
