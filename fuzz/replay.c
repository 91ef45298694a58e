/* Replays fuzz inputs without libFuzzer: every file named, and every file of every directory named, runs
 * through the harness once (tests/fuzz_replay.rs runs it over fuzz/corpus and fuzz/regressions under
 * `cargo test`). A finding aborts with the harness's message; the file's name is printed first. */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "harness.h"

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 1;
    }
    static unsigned char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    fprintf(stderr, "replay %s (%zu bytes)\n", path, n);
    LLVMFuzzerTestOneInput(buf, n);
    return 0;
}

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv) {
    fuzz_trace = getenv("FUZZ_TRACE") != NULL;
    int files = 0, failures = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            failures += run_file(argv[i]);
            files++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (!d) {
            perror(argv[i]);
            return 1;
        }
        char *names[4096];
        int n = 0;
        for (struct dirent *e; (e = readdir(d)) != NULL && n < 4096;) {
            if (e->d_name[0] == '.' || strcmp(e->d_name, "README.md") == 0) continue;
            names[n++] = strdup(e->d_name);
        }
        closedir(d);
        qsort(names, n, sizeof names[0], cmp);
        for (int k = 0; k < n; k++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], names[k]);
            failures += run_file(path);
            files++;
            free(names[k]);
        }
    }
    printf("replayed %d inputs\n", files);
    return failures ? 1 : 0;
}
