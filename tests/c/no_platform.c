/* Opening where no platform can be installed, the way a C program does it: lock, then open. tests/c_api.rs
 * runs it in a process of its own with OMEGA_PLATFORM set (bogus, or nvidia on a machine without a GPU).
 *
 *   no_platform CAUSE   the open fails with stage `platform` and CAUSE in its text; the unlock, close and
 *                       command-list create after it record that cause again, never a lock error
 *   no_platform ok      the platform exists here (a GPU machine): the same sequence opens and closes */
#include "check.h"

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: no_platform CAUSE|ok\n");
        return 2;
    }
    const char *cause = argv[1];
    (void)put_va; /* check.h's helper; nothing here launches */

    omega_gpu_session_lock();
    OmegaGpuSession *s = omega_gpu_session_open();
    if (strcmp(cause, "ok") == 0) {
        CHECK(s != NULL);
        omega_gpu_session_unlock();
        omega_gpu_session_close();
        CHECK(!omega_gpu_session_is_open());
        return check_done("no_platform");
    }

    CHECK(s == NULL);
    CHECK_ERROR("platform: ");
    CHECK_ERROR_HAS(cause);
    CHECK(omega_gpu_session_platform() == NULL);
    CHECK_ERROR("platform: ");

    /* There was no lock to take, so there is none to release: the record stays the platform's cause. */
    omega_gpu_session_unlock();
    CHECK_ERROR("platform: ");
    CHECK_ERROR_HAS(cause);

    omega_gpu_session_close();
    CHECK_ERROR("platform: ");
    CHECK_ERROR_HAS(cause);

    OmegaGpuCmdList *list = (OmegaGpuCmdList *)&cause;
    CHECK(omega_gpu_cmdlist_create(NULL, &list) == -1);
    CHECK(list == NULL);
    CHECK_ERROR("platform: ");
    CHECK_ERROR_HAS(cause);

    /* A device call without the lock names the platform too, not the lock. */
    OmegaGpuMem m;
    memset(&m, 0, sizeof m);
    CHECK(omega_gpu_session_alloc(64, &m) == -1);
    CHECK_ERROR("platform: ");
    CHECK(omega_gpu_session_is_blocked() == 0);
    return check_done("no_platform");
}
