/* odbox — checks a Prometheus text exposition on stdin with the tests'
 * strict parser (promparse.h): exit 0 and the number of samples, or exit
 * 1 and what is wrong. For the CLI tests (`odbox metrics | promcheck`). */
#include <stdio.h>
#include <stdlib.h>
#include "promparse.h"

int main(void)
{
    size_t cap = 1 << 16, n = 0;
    char *text = malloc(cap);
    for (size_t k; text && (k = fread(text + n, 1, cap - n - 1, stdin)) > 0;) {
        n += k;
        if (n + 1 == cap) {
            char *t = realloc(text, cap *= 2);
            if (!t)
                free(text);
            text = t;
        }
    }
    if (!text) {
        fputs("promcheck: out of memory\n", stderr);
        return 2;
    }
    text[n] = '\0';
    char msg[512];
    size_t samples = 0;
    int rc = prom_check(text, &samples, msg, sizeof msg);
    free(text);
    if (rc) {
        fprintf(stderr, "promcheck: %s\n", msg);
        return 1;
    }
    printf("promcheck: %zu samples\n", samples);
    return 0;
}
