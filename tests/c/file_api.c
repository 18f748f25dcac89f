/* pdcx extension pdcx_file.h: a file written in small pieces, read back with
 * seeks and preads, listed, stat'ed, truncated and removed; bad calls fail cleanly. */
#include "pdcx_file.h"
#include "check.h"
#include <stdio.h>
#include <string.h>

int main(void)
{
    pdcid_t pdc = PDCinit("pdc");
    CHECK_ID(pdc);
    char block[2880];
    PDCXfile *f = PDCXfile_open("pdcx://cfiles/a.fits", "wb");
    CHECK(f != NULL);
    for (int i = 0; i < 10; i++) {
        memset(block, 'a' + i, sizeof block);
        CHECK(PDCXfile_write(f, block, sizeof block) == (ssize_t)sizeof block);
    }
    CHECK(PDCXfile_pwrite(f, "SIMPLE", 6, 0) == 6);
    CHECK(PDCXfile_size(f) == 28800);
    CHECK(PDCXfile_close(f) == 0);

    /* Several files flushed at one consistency point. */
    PDCXfile *many[3];
    for (int i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "cfiles/m%d", i);
        many[i] = PDCXfile_open(name, "w");
        CHECK(many[i] != NULL && PDCXfile_write(many[i], name, strlen(name)) == (ssize_t)strlen(name));
    }
    CHECK(PDCXfile_flush_all(many, 3) == 0);
    PDCXfile *twice[2] = {many[0], many[0]};
    CHECK(PDCXfile_flush_all(twice, 2) == -1);
    for (int i = 0; i < 3; i++)
        CHECK(PDCXfile_close(many[i]) == 0);

    PDCXfile_stat_t st;
    CHECK(PDCXfile_stat("cfiles/a.fits", &st) == 0 && st.size == 28800 && st.mtime > 0);
    CHECK(PDCXfile_stat("cfiles/m1", &st) == 0 && st.size == 9);

    f = PDCXfile_open("cfiles/a.fits", "rb");
    CHECK(f != NULL);
    char got[8] = {0};
    CHECK(PDCXfile_read(f, got, 6) == 6 && memcmp(got, "SIMPLE", 6) == 0);
    CHECK(PDCXfile_seek(f, 2880 * 9, SEEK_SET) == 2880 * 9);
    CHECK(PDCXfile_read(f, got, 1) == 1 && got[0] == 'j');
    CHECK(PDCXfile_seek(f, -1, SEEK_END) == 28799 && PDCXfile_tell(f) == 28799);
    CHECK(PDCXfile_pread(f, got, 8, 28796) == 4);
    CHECK(PDCXfile_read(f, got, 8) == 1);
    CHECK(PDCXfile_read(f, got, 8) == 0);
    CHECK(PDCXfile_write(f, "x", 1) == -1); /* read-only */
    CHECK(PDCXfile_close(f) == 0);

    f = PDCXfile_open("cfiles/b.txt", "w+");
    CHECK(f != NULL && PDCXfile_write(f, "hello world", 11) == 11);
    CHECK(PDCXfile_truncate(f, 5) == 0 && PDCXfile_sync(f) == 0);
    CHECK(PDCXfile_close(f) == 0);
    CHECK(PDCXfile_stat("cfiles/b.txt", &st) == 0 && st.size == 5);

    char **names;
    size_t n;
    CHECK(PDCXfile_list("cfiles/", &names, &n) == 0 && n == 5);
    CHECK(strcmp(names[0], "cfiles/a.fits") == 0 && strcmp(names[1], "cfiles/b.txt") == 0);
    CHECK(strcmp(names[4], "cfiles/m2") == 0);
    PDCXfile_list_free(names, n);
    CHECK(PDCXfile_rename("cfiles/b.txt", "cfiles/renamed.txt") == 0);
    CHECK(PDCXfile_stat("cfiles/b.txt", &st) == -1);
    CHECK(PDCXfile_stat("cfiles/renamed.txt", &st) == 0 && st.size == 5);
    CHECK(PDCXfile_rename("cfiles/missing", "cfiles/x") == -1);
    CHECK(PDCXfile_remove("cfiles/renamed.txt") == 0);
    CHECK(PDCXfile_stat("cfiles/renamed.txt", &st) == -1);

    CHECK(PDCXfile_open("cfiles/missing", "r") == NULL);
    CHECK(PDCXfile_open("cfiles/../../etc/passwd", "r") == NULL);
    CHECK(PDCXfile_open("cfiles/a.fits", "x") == NULL);
    CHECK(PDCXfile_open("cfiles/a.fits", "rw") == NULL);
    CHECK(PDCXfile_open(NULL, "r") == NULL);
    CHECK(PDCXfile_read(NULL, got, 1) == -1);
    CHECK(PDCXfile_seek(NULL, 0, SEEK_SET) == -1);
    CHECK_OK(PDCclose(pdc));
    printf("file_api: ok\n");
    return 0;
}
