# llmkv: libllmkv (shared, SONAME libllmkv.so.0, plus the static libllmkv.a; on MinGW llmkv.dll,
# its import library and mimalloc.dll in bin/), llmkv.h, the CMake package llmkv::llmkv /
# llmkv::llmkv_static and llmkv.pc; feature "tools": the llmkv command line; feature "cuda"
# (Linux): libllmkv-cuda.so, the CUDA module libllmkv dlopens from its own folder (lib/, next
# to libllmkv.so).
vcpkg_from_github(
    OUT_SOURCE_PATH SOURCE_PATH
    REPO llmkv/llmkv
    REF "v${VERSION}"
    SHA512 0
    HEAD_REF main
)

# MinGW triplets (x64-mingw-dynamic, x64-mingw-static): the host KV tier loads mimalloc.dll
# from beside llmkv.dll, so the build makes one from mimalloc's release source
# (cmake/windows-mimalloc.cmake: no malloc override, nothing linked against it).
set(MIMALLOC_OPTIONS "")
if(VCPKG_TARGET_IS_MINGW)
    vcpkg_from_github(
        OUT_SOURCE_PATH MIMALLOC_SOURCE_PATH
        REPO microsoft/mimalloc
        REF v2.0.9
        SHA512 bf6945bfb600ade35dab34c7f570ee4f69a77612547ad874bbbd989a4e594a6a219c222a22c90c5e36f205aae4d5cd1a5e4651caed5433db275d414c6769bf49
        HEAD_REF master
    )
    set(MIMALLOC_OPTIONS "-DLLMKV_MIMALLOC_SOURCE_DIR=${MIMALLOC_SOURCE_PATH}")
endif()

vcpkg_check_features(OUT_FEATURE_OPTIONS FEATURE_OPTIONS
    FEATURES
        tools LLMKV_BUILD_TOOLS
)
if("cuda" IN_LIST FEATURES)
    set(LLMKV_CUDA ON)
else()
    set(LLMKV_CUDA OFF)
endif()

vcpkg_cmake_configure(
    SOURCE_PATH "${SOURCE_PATH}"
    OPTIONS
        ${FEATURE_OPTIONS}
        -DLLMKV_CUDA=${LLMKV_CUDA}
        -DLLMKV_BUILD_TESTS=OFF
        -DLLMKV_BUILD_BENCH=OFF
        -DLLMKV_WERROR=OFF
        ${MIMALLOC_OPTIONS}
        # flatc from the host flatbuffers port compiles src/kv/snapshot.fbs.
        "-DFLATC=${CURRENT_HOST_INSTALLED_DIR}/tools/flatbuffers/flatc${VCPKG_HOST_EXECUTABLE_SUFFIX}"
)
vcpkg_cmake_install()
vcpkg_cmake_config_fixup(PACKAGE_NAME llmkv CONFIG_PATH lib/cmake/llmkv)
vcpkg_fixup_pkgconfig()

if("tools" IN_LIST FEATURES)
    vcpkg_copy_tools(TOOL_NAMES llmkv AUTO_CLEAN)
    if(VCPKG_TARGET_IS_MINGW)
        # The host tier of llmkv.exe looks for mimalloc.dll beside it.
        file(COPY "${CURRENT_PACKAGES_DIR}/bin/mimalloc.dll" DESTINATION "${CURRENT_PACKAGES_DIR}/tools/${PORT}")
    endif()
endif()

file(REMOVE_RECURSE
    "${CURRENT_PACKAGES_DIR}/debug/include"
    "${CURRENT_PACKAGES_DIR}/debug/share")

file(INSTALL "${CMAKE_CURRENT_LIST_DIR}/usage" DESTINATION "${CURRENT_PACKAGES_DIR}/share/${PORT}")
vcpkg_install_copyright(FILE_LIST "${SOURCE_PATH}/LICENSE")
