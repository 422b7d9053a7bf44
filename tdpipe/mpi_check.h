// MPI_CHECK: an MPI call that fails ends the process with the rank, file, line, the call and MPI's
// own explanation. Shared by comm.c and comm_nccl.cuh; only under TD_MPI (the build found mpicc).
#pragma once
#ifdef TD_MPI
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1 // the C API only: Open MPI's C++ bindings warn in nvcc's C++ builds
#endif
#include <mpi.h>
#include <stdio.h>
#include "llmc/common.h"

#define MPI_CHECK(call)                                                    \
    do {                                                                   \
        int e_ = (call);                                                   \
        if (e_ != MPI_SUCCESS) {                                           \
            char s_[MPI_MAX_ERROR_STRING];                                 \
            int l_ = 0;                                                    \
            if (MPI_Error_string(e_, s_, &l_) != MPI_SUCCESS) snprintf(s_, sizeof s_, "MPI error %d", e_); \
            td_fatal("%s failed: %s", #call, s_);                          \
        }                                                                  \
    } while (0)
#endif
