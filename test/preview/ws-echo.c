/*
 * Test fixture: a minimal WebSocket echo server (RFC 6455) with no dependencies, built
 * statically by the preview tests so it runs in the busybox test image as well as on the host.
 * Usage: ws-echo PORT. Listens on 127.0.0.1:PORT, one process per connection; answers the
 * handshake (the Sec-WebSocket-Protocol offered first is accepted), then echoes every text or
 * binary message of up to 64 KiB and answers a close with a close.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void sha1(const unsigned char *msg, size_t len, unsigned char out[20]) {
  uint32_t h[5] = {0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0};
  size_t total = ((len + 8) / 64 + 1) * 64;
  unsigned char *buf = calloc(total, 1);
  memcpy(buf, msg, len);
  buf[len] = 0x80;
  uint64_t bits = (uint64_t)len * 8;
  for (int i = 0; i < 8; i++) buf[total - 1 - i] = (unsigned char)(bits >> (8 * i));
  for (size_t off = 0; off < total; off += 64) {
    uint32_t w[80];
    for (int i = 0; i < 16; i++) w[i] = (uint32_t)buf[off + 4 * i] << 24 | (uint32_t)buf[off + 4 * i + 1] << 16 | (uint32_t)buf[off + 4 * i + 2] << 8 | buf[off + 4 * i + 3];
    for (int i = 16; i < 80; i++) {
      uint32_t v = w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16];
      w[i] = v << 1 | v >> 31;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int i = 0; i < 80; i++) {
      uint32_t f, k;
      if (i < 20) f = (b & c) | (~b & d), k = 0x5A827999;
      else if (i < 40) f = b ^ c ^ d, k = 0x6ED9EBA1;
      else if (i < 60) f = (b & c) | (b & d) | (c & d), k = 0x8F1BBCDC;
      else f = b ^ c ^ d, k = 0xCA62C1D6;
      uint32_t t = (a << 5 | a >> 27) + f + e + k + w[i];
      e = d, d = c, c = b << 30 | b >> 2, b = a, a = t;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e;
  }
  free(buf);
  for (int i = 0; i < 20; i++) out[i] = (unsigned char)(h[i / 4] >> (24 - 8 * (i % 4)));
}

static void base64(const unsigned char *in, size_t len, char *out) {
  static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  size_t o = 0;
  for (size_t i = 0; i < len; i += 3) {
    uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < len ? (uint32_t)in[i + 1] << 8 : 0) | (i + 2 < len ? in[i + 2] : 0);
    out[o++] = t[v >> 18 & 63];
    out[o++] = t[v >> 12 & 63];
    out[o++] = i + 1 < len ? t[v >> 6 & 63] : '=';
    out[o++] = i + 2 < len ? t[v & 63] : '=';
  }
  out[o] = 0;
}

static int read_full(int fd, unsigned char *buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, buf + got, n - got);
    if (r <= 0) return -1;
    got += (size_t)r;
  }
  return 0;
}

/* The value of header `name` (case-insensitive) in `req`, copied to `out`. */
static int header(const char *req, const char *name, char *out, size_t cap) {
  size_t nlen = strlen(name);
  for (const char *p = strstr(req, "\r\n"); p != NULL; p = strstr(p + 2, "\r\n")) {
    if (strncasecmp(p + 2, name, nlen) == 0 && p[2 + nlen] == ':') {
      const char *v = p + 3 + nlen;
      while (*v == ' ') v++;
      size_t l = strcspn(v, ",\r");
      if (l >= cap) return -1;
      memcpy(out, v, l);
      out[l] = 0;
      return 0;
    }
  }
  return -1;
}

static void serve(int fd) {
  char req[8192];
  size_t used = 0;
  while (strstr(req, "\r\n\r\n") == NULL) {
    if (used + 1 >= sizeof req) return;
    ssize_t r = read(fd, req + used, sizeof req - 1 - used);
    if (r <= 0) return;
    used += (size_t)r;
    req[used] = 0;
  }
  char key[128], proto[128], accept_src[256], accept[64], resp[512];
  unsigned char digest[20];
  if (header(req, "Sec-WebSocket-Key", key, sizeof key) != 0) {
    const char *bad = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    if (write(fd, bad, strlen(bad)) < 0) return;
    return;
  }
  snprintf(accept_src, sizeof accept_src, "%s258EAFA5-E914-47DA-95CA-C5AB0DC85B11", key);
  sha1((const unsigned char *)accept_src, strlen(accept_src), digest);
  base64(digest, 20, accept);
  int n = snprintf(resp, sizeof resp, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n", accept);
  if (header(req, "Sec-WebSocket-Protocol", proto, sizeof proto) == 0) n += snprintf(resp + n, sizeof resp - (size_t)n, "Sec-WebSocket-Protocol: %s\r\n", proto);
  n += snprintf(resp + n, sizeof resp - (size_t)n, "\r\n");
  if (write(fd, resp, (size_t)n) != n) return;
  static unsigned char payload[65536 + 16];
  for (;;) {
    unsigned char hdr[2], mask[4], ext[8];
    if (read_full(fd, hdr, 2) != 0) return;
    int opcode = hdr[0] & 15;
    uint64_t len = hdr[1] & 127;
    if (len == 126) {
      if (read_full(fd, ext, 2) != 0) return;
      len = (uint64_t)ext[0] << 8 | ext[1];
    } else if (len == 127) {
      return;
    }
    if (len > 65536 || !(hdr[1] & 128) || read_full(fd, mask, 4) != 0 || read_full(fd, payload + 4, len) != 0) return;
    for (uint64_t i = 0; i < len; i++) payload[4 + i] ^= mask[i % 4];
    unsigned char frame_hdr[4];
    size_t hl;
    frame_hdr[0] = (unsigned char)(0x80 | opcode);
    if (len < 126) frame_hdr[1] = (unsigned char)len, hl = 2;
    else frame_hdr[1] = 126, frame_hdr[2] = (unsigned char)(len >> 8), frame_hdr[3] = (unsigned char)len, hl = 4;
    if (opcode == 9) frame_hdr[0] = 0x8A; /* ping -> pong */
    if (write(fd, frame_hdr, hl) != (ssize_t)hl || write(fd, payload + 4, len) != (ssize_t)len) return;
    if (opcode == 8) return;
  }
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: ws-echo PORT\n");
    return 2;
  }
  signal(SIGCHLD, SIG_IGN);
  int s = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in addr = {0};
  addr.sin_family = AF_INET;
  addr.sin_port = htons((uint16_t)atoi(argv[1]));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(s, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(s, 16) != 0) {
    perror("ws-echo");
    return 1;
  }
  printf("listening on %s\n", argv[1]);
  fflush(stdout);
  for (;;) {
    int c = accept(s, NULL, NULL);
    if (c < 0) continue;
    if (fork() == 0) {
      close(s);
      serve(c);
      close(c);
      _exit(0);
    }
    close(c);
  }
}
