// main() of llmkv-mpi: the llmkv command with --mpi, whose tensor-parallel ranks are MPI
// processes (`mpirun -np N llmkv-mpi run --mpi ...`). Kept out of the llmkv binary so that
// it (and its Debian package) does not depend on Open MPI.
//
// The transport (llmkv_tp_transport) maps llmkv's two collectives onto MPI_COMM_WORLD:
// broadcast -> MPI_Bcast, all_gather -> MPI_Allgather, in pieces below INT_MAX bytes.
// MPI is initialized on first use with MPI_THREAD_SERIALIZED (the engine makes one
// collective at a time, not always from the same thread) and finalized at exit.
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli_common.h"

namespace {

constexpr size_t kPiece = size_t(1) << 30;

int mpi_broadcast(void *, void *buf, size_t bytes, int32_t root) {
    for (size_t off = 0; off < bytes; off += kPiece) {
        const int n = int(std::min(kPiece, bytes - off));
        if (MPI_Bcast(static_cast<char *>(buf) + off, n, MPI_BYTE, root, MPI_COMM_WORLD) !=
            MPI_SUCCESS)
            return 1;
    }
    return 0;
}

int mpi_all_gather(void *, const void *send, void *recv, size_t bytes) {
    if (bytes < kPiece) {
        return MPI_Allgather(send, int(bytes), MPI_BYTE, recv, int(bytes), MPI_BYTE,
                             MPI_COMM_WORLD) == MPI_SUCCESS
                   ? 0
                   : 1;
    }
    // Large: one rank's piece at a time, broadcast from its owner.
    int size = 0, rank = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (int r = 0; r < size; ++r) {
        char *dst = static_cast<char *>(recv) + size_t(r) * bytes;
        if (r == rank)
            std::copy(static_cast<const char *>(send), static_cast<const char *>(send) + bytes,
                      dst);
        if (mpi_broadcast(nullptr, dst, bytes, r) != 0) return 1;
    }
    return 0;
}

void finalize() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
}

const llmkv_tp_transport *mpi_transport(std::string *error) {
    static llmkv_tp_transport t{};
    static bool ready = false;
    if (ready) return &t;
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
        *error = "MPI_Init_thread failed";
        return nullptr;
    }
    std::atexit(finalize);
    if (provided < MPI_THREAD_SERIALIZED) {
        *error =
            "this MPI library does not allow calls from more than one thread "
            "(MPI_THREAD_SERIALIZED)";
        return nullptr;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &t.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &t.size);
    t.broadcast = mpi_broadcast;
    t.all_gather = mpi_all_gather;
    ready = true;
    return &t;
}

}  // namespace

int main(int argc, char **argv) {
    llmkv_cli::set_mpi_transport(mpi_transport);
    return llmkv_cli::cli_main(argc, argv);
}
