/* posttrain demo: not built yet (its issue is open). */
#include "cli.h"

int cmd_demo(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "posttrain demo: not available in this build yet\n");
    return 1;
}
