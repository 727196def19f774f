#include "itest.h"
Suite *schema_suite(void) { return suite_create("schema"); }
