// The calling thread's last error message (mc_last_error), kept in C
// thread-specific storage: Go has no thread-local variables, and every
// export runs on its C caller's thread (cgo locks the goroutine to it for
// the call). A thread's message is freed when the thread exits.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cgo.h"

static pthread_key_t last_error_key;
static pthread_once_t last_error_once = PTHREAD_ONCE_INIT;

static void last_error_make_key(void) { pthread_key_create(&last_error_key, free); }

void mc_capi_set_last_error(char *msg) {
  pthread_once(&last_error_once, last_error_make_key);
  free(pthread_getspecific(last_error_key));
  pthread_setspecific(last_error_key, msg);
}

char *mc_capi_last_error(void) {
  pthread_once(&last_error_once, last_error_make_key);
  const char *msg = pthread_getspecific(last_error_key);
  return strdup(msg ? msg : "");
}
