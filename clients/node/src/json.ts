/**
 * The types of the data a task carries: what `Queue<Payload>` accepts as a payload.
 *
 * `JsonCompatible<T>` is `T` when every field of `T` is JSON data, and marks the fields
 * that are not (a function, a symbol, a bigint, a `Map`, a `Set`...) as `never`, so that
 * `T extends JsonCompatible<T>` holds for an `interface` (which has no index signature,
 * unlike `Record<string, unknown>`) and for a class with JSON fields (a DTO), and fails
 * at compile time for the rest. A class's methods are not its data (they live on its
 * prototype): they are let through, and an own field holding a function is refused at run
 * time. A type with a `toJSON()` (a `Date`) is let through as `JSON.stringify` writes it.
 *
 * @module
 */

/** A JSON value that is not a container. */
export type JsonPrimitive = string | number | boolean | null;

/** Any JSON value. */
export type JsonValue =
  JsonPrimitive | readonly JsonValue[] | { readonly [key: string]: JsonValue };

/** A JSON object: what a payload is on the wire. */
export type JsonObject = { readonly [key: string]: JsonValue };

/**
 * The payload of an untyped `Queue`: any object (an interface's too, which
 * `Record<string, unknown>` refuses for want of an index signature); checked at run time.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- an interface fits only an index signature of any
export type AnyPayload = { readonly [key: string]: any };

/** Built-in objects that JSON can't hold (`JSON.stringify` would write `{}` or throw). */
type NotJson =
  | bigint
  | symbol
  | ReadonlyMap<unknown, unknown>
  | ReadonlySet<unknown>
  | WeakMap<object, unknown>
  | WeakSet<object>
  | Promise<unknown>
  | RegExp
  | Error
  | ArrayBufferLike
  | ArrayBufferView;

/** `T` where it is JSON data, `never` where it is not (see the module's note). */
export type JsonCompatible<T> = unknown extends T
  ? T
  : T extends JsonPrimitive | undefined
    ? T
    : T extends NotJson
      ? never
      : T extends { toJSON(...args: never[]): unknown }
        ? T
        : T extends (...args: never[]) => unknown
          ? never
          : T extends readonly unknown[]
            ? { [K in keyof T]: JsonItem<T[K]> }
            : T extends object
              ? {
                  [K in keyof T]: T[K] extends (...args: never[]) => unknown
                    ? T[K]
                    : JsonCompatible<T[K]>;
                }
              : never;

/** An array's item: JSON data, and not `undefined` (JSON has no hole to put it in). */
type JsonItem<T> = T extends undefined ? never : JsonCompatible<T>;
