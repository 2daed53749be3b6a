/* posttrain info: not built yet (its issue is open). */
#include "cli.h"

int cmd_info(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "posttrain info: not available in this build yet\n");
    return 1;
}
