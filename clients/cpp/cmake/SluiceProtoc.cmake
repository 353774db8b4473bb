# SluiceProtoc.cmake compiles one of Sluice's .proto files under Sluice's
# private proto package, for CMakeLists.txt ("the generated stubs"):
#
#   cmake -DPROTOC=protoc -DPLUGIN=grpc_cpp_plugin -DPROTO_ROOT=api -DPROTO=doorman/doorman.proto \
#         -DINCLUDE=/usr/include -DGEN_DIR=build/gen -P SluiceProtoc.cmake
#
# 1. It copies PROTO_ROOT/PROTO to GEN_DIR/proto/sluice_internal/PROTO with
#    `package X;` made `package sluice_internal.X;` and each import of
#    another file under PROTO_ROOT prefixed with sluice_internal/. The
#    messages' full names and the file's name in protobuf's descriptor pool
#    ("sluice_internal/doorman/doorman.proto"), and so the C++ namespace
#    (sluice_internal::doorman) and every generated symbol, are then
#    Sluice's own: an application that compiles the same .proto itself
#    neither fails to link (duplicate symbols) nor aborts at start-up
#    ("File already exists in database: doorman/doorman.proto").
# 2. It runs protoc with the gRPC C++ plugin on the copy, into GEN_DIR.
# 3. It sets the gRPC names in the generated service code back to the
#    wire's: a method's path is "/<package>.<Service>/<Method>", and the
#    servers serve "/doorman.Capacity/GetCapacity", not
#    "/sluice_internal.doorman.Capacity/GetCapacity". The messages' names
#    never travel (the wire carries field numbers only), so only these
#    strings are rewritten: the method paths in the .grpc.pb.cc, and
#    service_full_name() in the .grpc.pb.h. The interop suite checks the
#    result against the Go server (docs/cpp.md, "The generated stubs").
foreach(v PROTOC PLUGIN PROTO_ROOT PROTO GEN_DIR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "SluiceProtoc.cmake: ${v} is not set")
  endif()
endforeach()
set(prefix sluice_internal)
set(src "${PROTO_ROOT}/${PROTO}")
set(copy_root "${GEN_DIR}/proto")
set(copy "${copy_root}/${prefix}/${PROTO}")

# 1. The copy under the private package.
file(READ "${src}" text)
string(REGEX MATCH "\npackage[ \t]+([A-Za-z0-9_.]+)[ \t]*;" found "\n${text}")
if(NOT found)
  message(FATAL_ERROR "SluiceProtoc.cmake: ${src} declares no package")
endif()
set(package "${CMAKE_MATCH_1}")
string(REGEX REPLACE "(^|\n)package[ \t]+[A-Za-z0-9_.]+[ \t]*;" "\\1package ${prefix}.${package};" text "${text}")
string(REGEX MATCHALL "import[ \t]+(public[ \t]+|weak[ \t]+)?\"[^\"]+\"" imports "${text}")
foreach(imp ${imports})
  string(REGEX REPLACE ".*\"([^\"]+)\"" "\\1" path "${imp}")
  if(EXISTS "${PROTO_ROOT}/${path}")
    string(REPLACE "\"${path}\"" "\"${prefix}/${path}\"" new "${imp}")
    string(REPLACE "${imp}" "${new}" text "${text}")
  endif()
endforeach()
file(WRITE "${copy}" "${text}")

# 2. protoc.
set(args "--proto_path=${copy_root}")
if(INCLUDE)
  list(APPEND args "--proto_path=${INCLUDE}")  # google/protobuf/*.proto
endif()
execute_process(
  COMMAND "${PROTOC}" ${args} "--cpp_out=${GEN_DIR}" "--grpc_out=${GEN_DIR}" "--plugin=protoc-gen-grpc=${PLUGIN}"
          "${prefix}/${PROTO}"
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "SluiceProtoc.cmake: protoc ${prefix}/${PROTO} failed (${rc})")
endif()

# 3. The wire's names in the service code.
string(REGEX REPLACE "\\.proto$" "" base "${PROTO}")
set(out "${GEN_DIR}/${prefix}/${base}")
file(READ "${out}.grpc.pb.cc" cc)
string(REPLACE "\"/${prefix}.${package}." "\"/${package}." cc "${cc}")
file(WRITE "${out}.grpc.pb.cc" "${cc}")
file(READ "${out}.grpc.pb.h" h)
string(REPLACE "return \"${prefix}.${package}." "return \"${package}." h "${h}")
file(WRITE "${out}.grpc.pb.h" "${h}")
