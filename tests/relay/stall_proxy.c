/* stall-proxy HOST PORT: a TCP proxy on 127.0.0.1 to HOST:PORT (an IPv4
 * address), for the relay tests: prints the port it listens on, forwards
 * both ways until SIGUSR1, and from then on forwards nothing with its
 * connections left open (a database that goes silent while its TCP stays
 * up, where keepalives find nothing wrong). Ends at SIGTERM or SIGINT. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include "netfault.h"

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: stall-proxy HOST PORT\n");
        return 2;
    }
    /* blocked before the proxy's thread starts, which inherits the mask:
     * sigwait below is the only taker */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    netfault *n = netfault_proxy(argv[1], atoi(argv[2]));
    printf("%d\n", netfault_port(n));
    fflush(stdout);
    for (int sig = 0; sigwait(&set, &sig) == 0 && sig == SIGUSR1;)
        netfault_stall(n);
    netfault_free(&n);
    return 0;
}
