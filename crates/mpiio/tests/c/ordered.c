/* Shared file pointer: MPI_File_write_ordered, then MPI_File_write_shared of one line per
 * rank (in whatever order the ranks come: only the set of lines is deterministic).
 * Usage: ordered PATH */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_File fh;
    if (MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh))
        MPI_Abort(MPI_COMM_WORLD, 2);
    MPI_File_set_size(fh, 0);
    char line[64];
    snprintf(line, sizeof line, "ordered line from rank %d\n", rank);
    if (MPI_File_write_ordered(fh, line, (int)strlen(line), MPI_CHAR, MPI_STATUS_IGNORE))
        MPI_Abort(MPI_COMM_WORLD, 3);
    snprintf(line, sizeof line, "shared line from rank %d\n", rank);
    if (MPI_File_write_shared(fh, line, (int)strlen(line), MPI_CHAR, MPI_STATUS_IGNORE))
        MPI_Abort(MPI_COMM_WORLD, 4);
    if (MPI_File_close(&fh)) MPI_Abort(MPI_COMM_WORLD, 5);
    MPI_Finalize();
    return 0;
}
