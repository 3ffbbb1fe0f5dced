// Lint for the example: typescript-eslint's type-checked rules, as in clients/node.
import js from "@eslint/js";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["dist/", "dist-test/", "node_modules/"] },
  js.configs.recommended,
  ...tseslint.configs.strictTypeChecked,
  {
    languageOptions: {
      parserOptions: {
        projectService: { allowDefaultProject: ["eslint.config.js"] },
        tsconfigRootDir: import.meta.dirname,
      },
    },
    rules: {
      "@typescript-eslint/restrict-template-expressions": ["error", { allowNumber: true, allowBoolean: true }],
      // Nest's modules are classes that only carry decorators
      "@typescript-eslint/no-extraneous-class": ["error", { allowWithDecorator: true }],
      // Nest types its options as classes (NestApplicationContextOptions) it reads as plain objects
      "@typescript-eslint/no-unsafe-class-instance-assignment": "off",
    },
  },
  {
    // node:test's describe and it return promises the runner awaits
    files: ["test/**/*.ts"],
    rules: { "@typescript-eslint/no-floating-promises": "off" },
  },
  {
    files: ["**/*.js"],
    ...tseslint.configs.disableTypeChecked,
  },
);
