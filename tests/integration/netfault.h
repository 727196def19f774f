/* odbox — network faults for the integration tests, on 127.0.0.1: a
 * listener that accepts connections and never answers (a black hole),
 * and a TCP proxy to a real server that can be told to stop forwarding
 * (a server or middlebox that goes silent mid-session). Each runs on its
 * own thread until freed. */
#ifndef ODBOX_TESTS_NETFAULT_H
#define ODBOX_TESTS_NETFAULT_H

typedef struct netfault netfault;

/* Accepts every connection, keeps it open, reads nothing, sends nothing. */
netfault *netfault_black_hole(void);
/* Forwards each accepted connection to host:port, both ways. */
netfault *netfault_proxy(const char *host, int port);
/* The same, to the server of dsn (a URL). */
netfault *netfault_proxy_to(const char *dsn);
/* The port it listens on. */
int netfault_port(const netfault *n);
/* Connections accepted so far. */
int netfault_accepted(netfault *n);
/* From now on forwards nothing either way; connections stay open. */
void netfault_stall(netfault *n);
/* The next answer a server sends, on any connection, is dropped and that
 * connection closed both ways; then forwards as before. What the client
 * sent reached the server: a COMMIT whose answer is lost after the
 * server committed. */
void netfault_cut_next_answer(netfault *n);
/* Closes, both ways, the connection accepted seq-th (from 0), if it is
 * still open: a session that a server or load balancer ended while it
 * sat idle. */
void netfault_close(netfault *n, int seq);
/* Stops the thread and closes every socket. NULL-safe; sets *n = NULL. */
void netfault_free(netfault **n);

/* dsn with its host and port replaced by 127.0.0.1:port and extra ("k=v")
 * appended to its query string (NULL: none); malloc'd. */
char *netfault_dsn(const char *dsn, int port, const char *extra);

#endif
