/* posttrain eval: not built yet (its issue is open). */
#include "cli.h"

int cmd_eval(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "posttrain eval: not available in this build yet\n");
    return 1;
}
