/* git-pf's C client of the command server (docs/server.md, "The C client" and "The wire").
 *
 * It does what git_pf/cli/client.py does before a served command, without starting Python:
 * it decides whether the server may run the command, finds the repository's git directory
 * and the server's socket in the user's private 0700 directory, checks that the server is
 * this user (SO_PEERCRED), sends the argv, environment, working directory, umask and its
 * stdin/stdout/stderr descriptors (SCM_RIGHTS), forwards SIGINT, SIGTERM and SIGHUP, and
 * exits with the command's status or dies by its signal. Whenever the server cannot run the
 * command (off, missing, refusing, another version or environment, anything failing before
 * the command began) it execs the Python entry point, which runs the command as it always
 * did (and starts a server). What the wire and the token hold comes from client.py: the
 * build generates pf_client.h from it (git_pf/cli/build_client.py).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "pf_client.h" /* PF_FALLBACK, PF_TOKEN_BASE(_LEN), PF_SERVED, PF_IN_PROCESS_ARGS, PF_START_ENV, limits */

extern char **environ;

static char **g_argv;
static const int forwarded[] = PF_FORWARDED;
#define NFORWARDED ((int)(sizeof forwarded / sizeof forwarded[0]))
static struct sigaction saved_action[NFORWARDED];
static int handlers_set;
static sigset_t saved_mask;
static volatile int g_sock = -1;

/* Run the command as if this client were not there: the Python entry point, same argv. */
static void fallback(void) {
    int i;
    if (g_sock >= 0)
        close(g_sock);
    if (handlers_set)
        for (i = 0; i < NFORWARDED; i++)
            sigaction(forwarded[i], &saved_action[i], NULL);
    sigprocmask(SIG_SETMASK, &saved_mask, NULL);
    execv(PF_FALLBACK, g_argv);
    fprintf(stderr, "git pf: cannot run %s: %s\n", PF_FALLBACK, strerror(errno));
    _exit(127);
}

/* -- growing byte buffers and the wire's fields --------------------------------------- */
struct buf {
    unsigned char *p;
    size_t n, cap;
};

static void put(struct buf *b, const void *data, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n)
            cap *= 2;
        unsigned char *p = realloc(b->p, cap);
        if (!p)
            fallback();
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void put32(struct buf *b, uint32_t v) {
    unsigned char x[4] = {v >> 24, v >> 16, v >> 8, v};
    put(b, x, 4);
}

static void field(struct buf *b, const void *data, size_t n) {
    put32(b, (uint32_t)n);
    put(b, data, n);
}

static void field_s(struct buf *b, const char *s) { field(b, s, strlen(s)); }

static uint32_t get32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* -- SHA-256 (the socket's name is a hash of the git directory) -------------------------- */
static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

#define ROR(x, n) ((x) >> (n) | (x) << (32 - (n)))

static void sha256_block(uint32_t h[8], const unsigned char *p) {
    uint32_t w[64], a, b, c, d, e, f, g, k, t1, t2;
    int i;
    for (i = 0; i < 16; i++)
        w[i] = get32(p + 4 * i);
    for (i = 16; i < 64; i++)
        w[i] = w[i - 16] + (ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3)) + w[i - 7] +
               (ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10));
    a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (i = 0; i < 64; i++) {
        t1 = k + (ROR(e, 6) ^ ROR(e, 11) ^ ROR(e, 25)) + ((e & f) ^ (~e & g)) + K256[i] + w[i];
        t2 = (ROR(a, 2) ^ ROR(a, 13) ^ ROR(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        k = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
}

static void sha256_hex(const unsigned char *data, size_t n, char out[65]) {
    uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    unsigned char tail[128] = {0};
    size_t full = n / 64 * 64, rest = n - full, i, tn;
    uint64_t bits = (uint64_t)n * 8;
    for (i = 0; i < full; i += 64)
        sha256_block(h, data + i);
    memcpy(tail, data + full, rest);
    tail[rest] = 0x80;
    tn = rest + 9 <= 64 ? 64 : 128;
    for (i = 0; i < 8; i++)
        tail[tn - 1 - i] = (unsigned char)(bits >> (8 * i));
    for (i = 0; i < tn; i += 64)
        sha256_block(h, tail + i);
    for (i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", (unsigned)(h[i / 4] >> (24 - 8 * (i % 4))) & 0xff);
}

/* -- where the server listens (client.py: find_git_dir, private_dir, socket_path) ------- */
static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* os.path.abspath: joined to the working directory, ".", ".." and repeated slashes resolved
 * by name (symbolic links are left to realpath). */
static int abspath(const char *start, char *out, size_t size) {
    char joined[PATH_MAX * 2];
    char cwd[PATH_MAX];
    size_t n = 0;
    const char *s;
    if (start[0] == '/') {
        if (snprintf(joined, sizeof joined, "%s", start) >= (int)sizeof joined)
            return -1;
    } else {
        if (!getcwd(cwd, sizeof cwd))
            return -1;
        if (snprintf(joined, sizeof joined, "%s/%s", cwd, start) >= (int)sizeof joined)
            return -1;
    }
    s = joined;
    while (*s) {
        const char *e;
        size_t len;
        while (*s == '/')
            s++;
        if (!*s)
            break;
        e = strchr(s, '/');
        len = e ? (size_t)(e - s) : strlen(s);
        if (len == 1 && s[0] == '.') {
        } else if (len == 2 && s[0] == '.' && s[1] == '.') {
            while (n > 0 && out[n - 1] != '/')
                n--;
            if (n > 0)
                n--;
        } else {
            if (n + 1 + len + 1 > size)
                return -1;
            out[n++] = '/';
            memcpy(out + n, s, len);
            n += len;
        }
        s += len;
    }
    if (n == 0)
        out[n++] = '/';
    out[n] = 0;
    return 0;
}

static int find_git_dir(const char *start, char *out) {
    char d[PATH_MAX], p[PATH_MAX + 16];
    const char *env = getenv("GIT_DIR");
    if (env && *env)
        return is_dir(env) && realpath(env, out) ? 0 : -1;
    if (abspath(start, d, sizeof d) < 0)
        return -1;
    for (;;) {
        snprintf(p, sizeof p, "%s%s.git", d, strcmp(d, "/") ? "/" : "");
        if (is_dir(p))
            return realpath(p, out) ? 0 : -1;
        if (is_file(p)) {
            char line[PATH_MAX + 64], target[PATH_MAX * 2 + 8], *s, *e;
            FILE *f = fopen(p, "re");
            if (!f)
                return -1;
            s = fgets(line, sizeof line, f);
            fclose(f);
            if (!s)
                return -1;
            while (isspace((unsigned char)*s))
                s++;
            e = s + strlen(s);
            while (e > s && isspace((unsigned char)e[-1]))
                *--e = 0;
            if (strncmp(s, "gitdir:", 7))
                return -1;
            s += 7;
            while (isspace((unsigned char)*s))
                s++;
            if (*s == '/')
                snprintf(target, sizeof target, "%s", s);
            else
                snprintf(target, sizeof target, "%s/%s", d, s);
            return realpath(target, out) ? 0 : -1;
        }
        snprintf(p, sizeof p, "%s/HEAD", d);
        if (is_file(p)) {
            char o[PATH_MAX + 16], r[PATH_MAX + 16];
            snprintf(o, sizeof o, "%s/objects", d);
            snprintf(r, sizeof r, "%s/refs", d);
            if (is_dir(o) && is_dir(r))
                return realpath(d, out) ? 0 : -1;
        }
        if (!strcmp(d, "/"))
            return -1;
        *strrchr(d, '/') = 0;
        if (!d[0])
            strcpy(d, "/");
    }
}

static int socket_path(const char *git_dir, char *out, size_t size) {
    char base[PATH_MAX], hex[65];
    const char *runtime = getenv("XDG_RUNTIME_DIR");
    struct stat st;
    if (runtime && runtime[0] == '/')
        snprintf(base, sizeof base, "%s/git-pf", runtime);
    else
        snprintf(base, sizeof base, "/tmp/git-pf-%u", (unsigned)getuid());
    if (mkdir(base, 0700) < 0 && errno != EEXIST)
        return -1;
    if (lstat(base, &st) < 0 || st.st_uid != getuid() || (st.st_mode & 077) || !S_ISDIR(st.st_mode))
        return -1;
    sha256_hex((const unsigned char *)git_dir, strlen(git_dir), hex);
    hex[24] = 0;
    if (snprintf(out, size, "%s/%s.sock", base, hex) >= (int)size || strlen(out) > PF_SUN_PATH_MAX)
        return -1;
    return 0;
}

/* -- which commands go to the server (client.py: route) ------------------------------------ */
static int disabled(void) {
    const char *v = getenv("GIT_PF_SERVER");
    char s[16];
    size_t n;
    if (!v)
        return 0;
    while (isspace((unsigned char)*v))
        v++;
    n = strlen(v);
    while (n && isspace((unsigned char)v[n - 1]))
        n--;
    if (n >= sizeof s)
        return 0;
    for (size_t i = 0; i < n; i++)
        s[i] = (char)tolower((unsigned char)v[i]);
    s[n] = 0;
    return !strcmp(s, "0") || !strcmp(s, "false") || !strcmp(s, "no") || !strcmp(s, "off");
}

/* Whether this process has a controlling terminal (client.py: has_terminal). */
static int has_terminal(void) {
    int fd = open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    close(fd);
    return 1;
}

static int served(int argc, char **argv) {
    static const char *const commands[] = PF_SERVED, *const in_process[] = PF_IN_PROCESS_ARGS;
    static const char *const without_terminal[] = PF_SERVED_WITHOUT_TERMINAL;
    int ok = 0, needs_no_terminal = 0;
    if (argc < 2 || disabled())
        return 0;
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        ok |= !strcmp(argv[1], commands[i]);
    for (size_t i = 0; i < sizeof without_terminal / sizeof *without_terminal; i++)
        needs_no_terminal |= !strcmp(argv[1], without_terminal[i]);
    ok |= needs_no_terminal;
    for (int a = 1; ok && a < argc; a++)
        for (size_t i = 0; i < sizeof in_process / sizeof *in_process; i++) {
            size_t n = strlen(in_process[i]);
            if (!strncmp(argv[a], in_process[i], n) && (argv[a][n] == 0 || argv[a][n] == '='))
                ok = 0;
        }
    /* a terminal on stdin: prompts and editors read it; in-process. push and fetch also with
     * a controlling terminal: ssh and credential helpers prompt on /dev/tty */
    return ok && !isatty(0) && !(needs_no_terminal && has_terminal());
}

/* -- the request ---------------------------------------------------------------------- */
/* os.environ's entries: those with a '=', the first of a name wins. */
static int first_of_name(char **env, int i) {
    size_t k = strchr(env[i], '=') - env[i];
    for (int j = 0; j < i; j++) {
        const char *eq = strchr(env[j], '=');
        if (eq && (size_t)(eq - env[j]) == k && !strncmp(env[i], env[j], k))
            return 0;
    }
    return 1;
}

static int start_env(const char *entry) {
    static const char *const names[] = PF_START_ENV;
    size_t k = strchr(entry, '=') - entry;
    if (!strncmp(entry, "PYTHON", 6))
        return 1;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strlen(names[i]) == k && !strncmp(entry, names[i], k))
            return 1;
    return 0;
}

static int by_bytes(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void request(struct buf *msg, int argc, char **argv) {
    struct buf body = {0};
    char cwd[PATH_MAX], num[32], **env = environ, **picked;
    int nenv = 0, npicked = 0;
    mode_t mask = umask(0);
    struct sigaction sa;
    umask(mask);
    if (!getcwd(cwd, sizeof cwd))
        fallback();
    while (env[nenv])
        nenv++;
    picked = calloc(nenv + 1, sizeof *picked);
    if (!picked)
        fallback();
    for (int i = 0; i < nenv; i++)
        if (strchr(env[i], '=') && first_of_name(env, i) && start_env(env[i]))
            picked[npicked++] = env[i];
    qsort(picked, npicked, sizeof *picked, by_bytes);
    field_s(&body, "run");
    {
        struct buf token = {0};
        put(&token, PF_TOKEN_BASE, PF_TOKEN_BASE_LEN);
        for (int i = 0; i < npicked; i++) {
            put(&token, "", 1);
            put(&token, picked[i], strlen(picked[i]));
        }
        field(&body, token.p, token.n);
        free(token.p);
    }
    field_s(&body, cwd);
    snprintf(num, sizeof num, "%u", (unsigned)mask);
    field_s(&body, num);
    sigaction(SIGINT, NULL, &sa);
    field_s(&body, sa.sa_handler == SIG_IGN ? "i" : "");
    snprintf(num, sizeof num, "%d", argc - 1);
    field_s(&body, num);
    for (int i = 1; i < argc; i++)
        field_s(&body, argv[i]);
    for (int i = 0; i < nenv; i++)
        if (strchr(env[i], '=') && first_of_name(env, i))
            field_s(&body, env[i]);
    free(picked);
    if (body.n > PF_MAX_MESSAGE)
        fallback();
    put32(msg, (uint32_t)body.n);
    put(msg, body.p, body.n);
    free(body.p);
}

static void send_request(int sock, const struct buf *msg) {
    int fds[3] = {0, 1, 2};
    char control[CMSG_SPACE(sizeof fds)];
    struct iovec iov = {msg->p, msg->n};
    struct msghdr mh = {0};
    struct cmsghdr *c;
    size_t sent;
    ssize_t r;
    memset(control, 0, sizeof control);
    mh.msg_iov = &iov, mh.msg_iovlen = 1, mh.msg_control = control, mh.msg_controllen = sizeof control;
    c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET, c->cmsg_type = SCM_RIGHTS, c->cmsg_len = CMSG_LEN(sizeof fds);
    memcpy(CMSG_DATA(c), fds, sizeof fds);
    do
        r = sendmsg(sock, &mh, MSG_NOSIGNAL);
    while (r < 0 && errno == EINTR);
    if (r < 0)
        fallback();
    for (sent = (size_t)r; sent < msg->n; sent += (size_t)r) {
        r = send(sock, msg->p + sent, msg->n - sent, MSG_NOSIGNAL);
        if (r < 0 && errno == EINTR)
            r = 0;
        else if (r < 0)
            fallback();
    }
}

/* -- signals --------------------------------------------------------------------------- */
static void forward(int sig) {
    int saved = errno;
    unsigned char m[32];
    char digits[4];
    int nd = 0, n = 0;
    do
        digits[nd++] = (char)('0' + sig % 10);
    while ((sig /= 10) && nd < 4);
    /* pack([b"signal", str(sig)]) */
    uint32_t body = 4 + 6 + 4 + nd;
    m[n++] = body >> 24, m[n++] = body >> 16, m[n++] = body >> 8, m[n++] = body;
    m[n++] = 0, m[n++] = 0, m[n++] = 0, m[n++] = 6;
    memcpy(m + n, "signal", 6), n += 6;
    m[n++] = 0, m[n++] = 0, m[n++] = 0, m[n++] = (unsigned char)nd;
    while (nd)
        m[n++] = (unsigned char)digits[--nd];
    if (g_sock >= 0)
        send(g_sock, m, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    errno = saved;
}

static void die_by(int sig) {
    sigset_t one;
    signal(sig, SIG_DFL);
    sigemptyset(&one);
    sigaddset(&one, sig);
    sigprocmask(SIG_UNBLOCK, &one, NULL);
    raise(sig);
    exit(128 + sig);
}

/* When git's dispatcher (`git pf ...`) started this process, have the kernel send it SIGTERM
 * when that parent ends, as the Python entry point does (cli/__init__.py: _die_with_git). */
static void die_with_git(void) {
    char path[64], comm[32] = {0};
    pid_t parent = getppid();
    int fd;
    ssize_t n;
    snprintf(path, sizeof path, "/proc/%d/comm", (int)parent);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    n = read(fd, comm, sizeof comm - 1);
    close(fd);
    if (n <= 0 || strcmp(comm, "git\n"))
        return;
    if (prctl(PR_SET_PDEATHSIG, SIGTERM, 0, 0, 0) != 0)
        return;
    if (getppid() != parent)
        kill(getpid(), SIGTERM);
}

/* -- the replies ----------------------------------------------------------------------- */
static int digits_only(const unsigned char *p, uint32_t n) {
    if (!n)
        return 0;
    for (uint32_t i = 0; i < n; i++)
        if (p[i] < '0' || p[i] > '9')
            return 0;
    return 1;
}

static int field_is(const unsigned char *p, uint32_t n, const char *s) { return n == strlen(s) && !memcmp(p, s, n); }

/* Wait for the command's end: exit with its status or die by its signal; run it elsewhere
 * (fallback) when the server refuses or ends before the command began. */
static void talk(int sock) {
    struct buf in = {0};
    int started = 0;
    unsigned char chunk[65536];
    for (;;) {
        size_t pos = 0;
        ssize_t r = read(sock, chunk, sizeof chunk);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        put(&in, chunk, (size_t)r);
        while (in.n - pos >= 4) {
            uint32_t len = get32(in.p + pos), at = 0, nf = 0;
            const unsigned char *body = in.p + pos + 4, *f[3];
            uint32_t fl[3];
            if (len > PF_MAX_MESSAGE)
                goto broken;
            if (in.n - pos - 4 < len)
                break;
            while (at < len) {
                uint32_t n;
                if (len - at < 4 || len - at - 4 < (n = get32(body + at)))
                    goto broken;
                if (nf < 3)
                    f[nf] = body + at + 4, fl[nf] = n;
                nf++;
                at += 4 + n;
            }
            pos += 4 + len;
            if (!nf)
                continue;
            if (field_is(f[0], fl[0], "started")) {
                started = 1;
            } else if (field_is(f[0], fl[0], "exit") && nf == 2 && digits_only(f[1], fl[1])) {
                unsigned code = 0;
                for (uint32_t i = 0; i < fl[1]; i++)
                    code = (code * 10 + (f[1][i] - '0')) & 0xFF; /* & 0xFF, as int(...) & 0xFF */
                exit((int)code);
            } else if (field_is(f[0], fl[0], "signal") && nf == 2 && digits_only(f[1], fl[1]) && fl[1] <= 2) {
                int sig = 0;
                for (uint32_t i = 0; i < fl[1]; i++)
                    sig = sig * 10 + (f[1][i] - '0');
                if (sig > 0 && sig < 65)
                    die_by(sig);
            } else if (field_is(f[0], fl[0], "refuse") && !started) {
                fallback();
            }
        }
        memmove(in.p, in.p + pos, in.n - pos);
        in.n -= pos;
    }
broken:
    if (!started)
        fallback(); /* it ended before the command began: run it elsewhere */
    fputs("git pf: the command server stopped in the middle of the command "
          "(it may have done part of its work; run it again)\n",
          stderr);
    exit(PF_LOST);
}

int main(int argc, char **argv) {
    char git_dir[PATH_MAX], path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    struct sockaddr_un addr = {0};
    struct ucred cred;
    socklen_t clen = sizeof cred;
    struct buf msg = {0};
    const char *repo;
    sigset_t block;
    int sock;

    g_argv = argv;
    sigemptyset(&block);
    for (int i = 0; i < NFORWARDED; i++)
        sigaddset(&block, forwarded[i]);
    sigprocmask(SIG_BLOCK, &block, &saved_mask); /* a signal now reaches the command, or the fallback */
    if (!served(argc, argv))
        fallback();
    die_with_git();
    repo = getenv("GIT_PF_REPO");
    if (find_git_dir(repo && *repo ? repo : ".", git_dir) < 0 || socket_path(git_dir, path, sizeof path) < 0)
        fallback();
    sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (sock < 0)
        fallback();
    g_sock = sock;
    addr.sun_family = AF_UNIX;
    memcpy(addr.sun_path, path, strlen(path) + 1);
    if (connect(sock, (struct sockaddr *)&addr, sizeof addr) < 0)
        fallback(); /* no server: the Python entry point runs it and starts one */
    if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0 || cred.uid != getuid())
        fallback();
    request(&msg, argc, argv);
    send_request(sock, &msg);
    free(msg.p);
    for (int i = 0; i < NFORWARDED; i++) {
        struct sigaction sa = {0};
        sigaction(forwarded[i], NULL, &saved_action[i]);
        if (saved_action[i].sa_handler == SIG_IGN)
            continue;
        sa.sa_handler = forward;
        sa.sa_flags = SA_RESTART;
        sigemptyset(&sa.sa_mask);
        sigaction(forwarded[i], &sa, NULL);
    }
    handlers_set = 1;
    sigprocmask(SIG_SETMASK, &saved_mask, NULL);
    talk(sock);
    return PF_LOST;
}
