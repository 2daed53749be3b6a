/* posttrain tokenize: not built yet (its issue is open). */
#include "cli.h"

int cmd_tokenize(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "posttrain tokenize: not available in this build yet\n");
    return 1;
}
