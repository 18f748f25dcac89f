/* Parallel HDF5 through MPI-IO: every rank writes its rows of a 2-D dataset collectively,
 * plus an attribute; the file is flushed (MPI_File_sync), then closed.
 * Object times are off so two runs make identical bytes. Usage: phdf5 PATH */
#include <hdf5.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define ROWS 64
#define COLS 1000

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL);
    hid_t file = H5Fcreate(argv[1], H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    if (file < 0) { fprintf(stderr, "H5Fcreate failed\n"); MPI_Abort(MPI_COMM_WORLD, 2); }
    hsize_t dims[2] = {(hsize_t)ROWS * n, COLS};
    hid_t space = H5Screate_simple(2, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_obj_track_times(dcpl, 0);
    hid_t dset = H5Dcreate2(file, "field", H5T_NATIVE_DOUBLE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    hsize_t start[2] = {(hsize_t)ROWS * rank, 0}, count[2] = {ROWS, COLS};
    H5Sselect_hyperslab(space, H5S_SELECT_SET, start, NULL, count, NULL);
    hid_t mem = H5Screate_simple(2, count, NULL);
    double *buf = malloc(sizeof(double) * ROWS * COLS);
    for (int i = 0; i < ROWS * COLS; i++) buf[i] = rank * 1e6 + i * 0.5;
    hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
    H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE);
    if (H5Dwrite(dset, H5T_NATIVE_DOUBLE, mem, space, dxpl, buf) < 0) MPI_Abort(MPI_COMM_WORLD, 3);
    hid_t aspace = H5Screate(H5S_SCALAR);
    hid_t attr = H5Acreate2(dset, "ranks", H5T_NATIVE_INT, aspace, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(attr, H5T_NATIVE_INT, &n);
    H5Aclose(attr);
    H5Sclose(aspace);
    H5Fflush(file, H5F_SCOPE_GLOBAL);
    H5Pclose(dxpl);
    H5Sclose(mem);
    H5Dclose(dset);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Fclose(file);
    H5Pclose(fapl);
    free(buf);
    if (rank == 0) printf("wrote %s\n", argv[1]);
    MPI_Finalize();
    return 0;
}
