// Keras's callbacks, in namespace typeflow::callbacks (keras.io/api/callbacks),
// each constructed from its required arguments and an options struct with
// Keras's argument names, and passed to fit as .callbacks = {&a, &b}.
#pragma once

#include "typeflow/callbacks/backup_and_restore.hpp"
#include "typeflow/callbacks/csv_logger.hpp"
#include "typeflow/callbacks/early_stopping.hpp"
#include "typeflow/callbacks/html_report.hpp"
#include "typeflow/callbacks/lambda_callback.hpp"
#include "typeflow/callbacks/learning_rate_scheduler.hpp"
#include "typeflow/callbacks/model_checkpoint.hpp"
#include "typeflow/callbacks/reduce_lr_on_plateau.hpp"
#include "typeflow/callbacks/swap_ema_weights.hpp"
#include "typeflow/callbacks/tensorboard.hpp"
#include "typeflow/callbacks/terminate_on_nan.hpp"
